import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def demo_basic(rank, world_size, epochs):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    model = DDP(torch.nn.Linear(10, 5).to(rank), device_ids=[rank])
    for _ in range(epochs):
        model(torch.randn(20, 10)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    n_gpus = torch.cuda.device_count()
    mp.spawn(demo_basic, args=(n_gpus,), nprocs=n_gpus, join=True)
