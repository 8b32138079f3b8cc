import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def validate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x in loader:
            total += model(x.cuda()).sum().item()
    return total


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    model = DDP(torch.nn.BatchNorm1d(4).cuda(), device_ids=[local_rank])
    data = [torch.randn(8, 4) for _ in range(4)]
    for epoch in range(2):
        for x in data:
            model(x.cuda()).sum().backward()
        if rank == 0:
            score = validate(model, data)
            print(score)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
