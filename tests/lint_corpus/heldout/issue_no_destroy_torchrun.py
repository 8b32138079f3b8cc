import os
import torch
import torch.distributed as dist


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
    sampler = torch.utils.data.distributed.DistributedSampler(list(range(64)))
    loader = torch.utils.data.DataLoader(list(range(64)), sampler=sampler, batch_size=8)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch in loader:
            pass


if __name__ == "__main__":
    main()
