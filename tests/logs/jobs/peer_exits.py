"""Rank 1 runs out of batches and exits while rank 0 still all-reduces (GLOO_PEER_EXITED)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from common import init  # noqa: E402

rank, world = init()
steps = 6 if rank == 0 else 3
for step in range(steps):
    dist.all_reduce(torch.ones(1))
    print(f"rank {rank} step {step}", flush=True)
print(f"rank {rank} finished its shard", flush=True)
os._exit(0)
