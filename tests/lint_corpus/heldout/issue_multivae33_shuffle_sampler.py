import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def get_loader(dataset, batch_size, world_size, rank):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, sampler=sampler), sampler


def main():
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = torch.nn.Linear(4, 4).cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    loader, sampler = get_loader(torch.randn(100, 4), 10, world_size, rank)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x in loader:
            model(x.cuda()).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
