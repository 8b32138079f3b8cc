import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group(backend="nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = DDP(torch.nn.Linear(20, 1).cuda(), device_ids=[rank])
    x = torch.randn(4, 20).to(f"cuda:{rank}")
    model(x).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
