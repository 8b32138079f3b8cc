import argparse
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--resume", default="")
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = torch.nn.Linear(8, 8).cuda()
    if args.resume:
        checkpoint = torch.load(args.resume)
        model.load_state_dict(checkpoint["state_dict"])
    model = DDP(model, device_ids=[local_rank])
    for step in range(10):
        loss = model(torch.randn(4, 8, device="cuda")).sum()
        loss.backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
