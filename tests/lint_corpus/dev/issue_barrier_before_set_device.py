import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    if dist.get_rank() != 0:
        dist.barrier()
    dataset = list(range(100))
    if dist.get_rank() == 0:
        dist.barrier()
    torch.cuda.set_device(local_rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
