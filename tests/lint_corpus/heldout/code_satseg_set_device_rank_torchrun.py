import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def setup():
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    return rank


def main():
    rank = setup()
    model = torch.nn.Linear(8, 2).to(rank)
    model = DDP(model, device_ids=[rank])
    for _ in range(3):
        model(torch.randn(4, 8, device=f"cuda:{rank}")).sum().backward()
    if rank == 0:
        torch.save(model.state_dict(), "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
