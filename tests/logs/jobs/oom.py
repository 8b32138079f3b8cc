"""Rank 1 loads a "data set" into host memory until the kernel's OOM killer ends it (HOST_OOM_SIGKILL).

The capture script runs torchrun inside a memory cgroup with a small limit, so only this job is hit.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from common import init  # noqa: E402

rank, world = init(120)
if rank == int(os.environ.get("JOB_OOM_RANK", "1")):
    print(f"rank {rank}: loading the data set into memory", flush=True)
    hoard = []
    while True:
        block = bytearray(64 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        hoard.append(block)
print(f"rank {rank}: waiting for the others", flush=True)
dist.all_reduce(torch.ones(1))
