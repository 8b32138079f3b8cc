"""Ranks call different collectives; run with TORCH_DISTRIBUTED_DEBUG=DETAIL (COLLECTIVE_MISMATCH_ACROSS_RANKS)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from common import init  # noqa: E402

rank, world = init()
metrics = torch.tensor([1.0, 2.0])
dist.all_reduce(metrics)
if rank == 0:
    dist.all_reduce(torch.tensor([float(rank)]))   # logs an extra metric only on rank 0
else:
    dist.broadcast(torch.zeros(3), src=0)
print(f"rank {rank} done", flush=True)
