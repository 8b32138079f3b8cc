import os
import torch
import torch.distributed as dist


def load_pretrained(model, path):
    state = torch.load(path, map_location="cuda:0")
    model.load_state_dict(state)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    model = torch.nn.Linear(4, 4)
    load_pretrained(model, "pretrained.pth")
    torch.cuda.set_device(local_rank)
    model = torch.nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[local_rank])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
