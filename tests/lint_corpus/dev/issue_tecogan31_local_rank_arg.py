import argparse
import torch
import torch.distributed as dist


def train(opt):
    model = torch.nn.Conv2d(3, 3, 3).cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[opt.local_rank])
    return model


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--opt", type=str, required=True)
    parser.add_argument("--local_rank", default=-1, type=int, help="local gpu index")
    args = parser.parse_args()
    if args.local_rank >= 0:
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl", init_method="env://")
    train(args)
    dist.destroy_process_group()
