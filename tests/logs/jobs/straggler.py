"""Rank 0 evaluates alone for longer than the process-group timeout (GLOO_COLLECTIVE_TIMEOUT)."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from common import init  # noqa: E402

rank, world = init(float(os.environ.get("JOB_PG_TIMEOUT", "8")))
for step in range(3):
    dist.all_reduce(torch.ones(1))
    print(f"rank {rank} step {step}", flush=True)
if rank == 0:
    print("rank 0: running evaluation", flush=True)
    time.sleep(float(os.environ.get("JOB_EVAL_S", "30")))
dist.all_reduce(torch.ones(1))
