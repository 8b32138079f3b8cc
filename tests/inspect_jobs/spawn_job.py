"""An mp.spawn Gloo job (the DDP tutorial's shape: MASTER_ADDR set inside each child, so the rank is in no
environment) where SPAWN_ODD calls broadcast while the others call all_reduce. argv: nprocs port."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"ready {rank} pid {os.getpid()}", flush=True)
    if rank == int(os.environ.get("SPAWN_ODD", "1")):
        dist.broadcast(t, 0)  # LINE_SPAWN_ODD
    dist.all_reduce(t)  # LINE_SPAWN_WAIT


if __name__ == "__main__":
    n = int(sys.argv[1])
    mp.spawn(run, args=(n, sys.argv[2]), nprocs=n)
