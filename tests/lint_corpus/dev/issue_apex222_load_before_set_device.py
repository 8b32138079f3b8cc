import argparse
import os
import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default="model.pt")
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    model = torch.nn.Linear(16, 16)
    model.load_state_dict(torch.load(args.checkpoint))
    model = model.cuda()
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl", init_method="env://")
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    for _ in range(5):
        model(torch.randn(2, 16).cuda()).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
