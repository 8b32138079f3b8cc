"""Ranks get different numbers of batches; DDP's join() throws (UNEVEN_INPUTS_HANG)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from common import init  # noqa: E402

rank, world = init()
model = DDP(nn.Linear(4, 1))
batches = 5 + 3 * rank   # shards of different size
with model.join(throw_on_early_termination=True):
    for step in range(batches):
        model(torch.randn(2, 4)).sum().backward()
        print(f"rank {rank} step {step}/{batches}", flush=True)
