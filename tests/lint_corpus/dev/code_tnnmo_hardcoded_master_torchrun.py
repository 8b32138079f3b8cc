import os
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed import init_process_group, destroy_process_group


def ddp_setup():
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    init_process_group(backend="nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def main(dataset, epochs=5):
    ddp_setup()
    local_rank = int(os.environ["LOCAL_RANK"])
    model = DDP(torch.nn.Linear(3, 3).to(local_rank), device_ids=[local_rank])
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
    for epoch in range(epochs):
        for x in loader:
            model(x.to(local_rank)).sum().backward()
    if local_rank == 0:
        torch.save(model.module.state_dict(), "ckpt.pt")
    destroy_process_group()


if __name__ == "__main__":
    main(torch.randn(64, 3))
