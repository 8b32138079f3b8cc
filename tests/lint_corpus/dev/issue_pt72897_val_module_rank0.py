import os
import torch
import torch.distributed as dist


def run(model, train_loader, valid_loader, loss_fn, optimizer, rank, epochs):
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        for sample in train_loader:
            images = sample["data"].cuda(non_blocking=True)
            loss = loss_fn(model(images), sample["label"].cuda(non_blocking=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
            with torch.no_grad():
                model.eval()
                for sample in valid_loader:
                    images = sample["data"].cuda(non_blocking=True)
                    outputs = model.module(images)
                model.train()
        dist.barrier()


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
    dist.destroy_process_group()
    return model


if __name__ == "__main__":
    main()
