"""Ranks build different models and wrap them in DDP (DDP_MODEL_MISMATCH_ACROSS_RANKS): a rank-dependent
branch in model construction. JOB_MISMATCH=count gives rank 1 an extra layer (the parameter counts differ),
JOB_MISMATCH=shape a wider layer (same count, other sizes); DDP's constructor checks both across ranks."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from common import init  # noqa: E402

rank, world = init()
kind = os.environ.get("JOB_MISMATCH", "count")
if kind == "count":
    layers = [nn.Linear(8, 8)] + ([nn.Linear(8, 8)] if rank == 1 else [])
else:
    layers = [nn.Linear(8, 16 if rank == 1 else 8)]
model = DDP(nn.Sequential(*layers))
print(f"rank {rank}: DDP ready", flush=True)
