import argparse
import torch
import torch.distributed as dist


def parse_options():
    parser = argparse.ArgumentParser()
    parser.add_argument("-opt", type=str, required=True)
    parser.add_argument("--launcher", choices=["none", "pytorch"], default="none")
    parser.add_argument("--local_rank", type=int, default=0)
    return parser.parse_args()


def init_dist(launcher):
    if launcher == "pytorch":
        dist.init_process_group(backend="nccl")


def main():
    args = parse_options()
    init_dist(args.launcher)
    torch.cuda.set_device(args.local_rank)
    net = torch.nn.Conv2d(3, 3, 3).cuda()
    if args.launcher == "pytorch":
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[torch.cuda.current_device()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
