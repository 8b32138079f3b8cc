"""One rank raises an ordinary exception in the training loop (USER_CODE_EXCEPTION): its data yields a bad
batch; the other ranks block in the next all_reduce until torchrun stops them. JOB_BAD_RANK picks the rank
(default 1), so the failing rank can also be the one hosting the store."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from common import init  # noqa: E402

BAD_RANK = int(os.environ.get("JOB_BAD_RANK", "1"))


def batches(rank):
    for step in range(5):
        if rank == BAD_RANK and step == 2:
            raise ValueError(f"batch {step} has 3 labels for 4 inputs")
        yield torch.ones(4)


rank, world = init()
for x in batches(rank):
    dist.all_reduce(x)
    time.sleep(0.2)
dist.destroy_process_group()
