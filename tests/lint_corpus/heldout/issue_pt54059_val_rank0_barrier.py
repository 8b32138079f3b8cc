import os
import torch
import torch.nn as nn
import torch.distributed as dist
import torch.multiprocessing as mp

os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = "12346"


def train(gpu, args):
    dist.init_process_group(backend="nccl", world_size=args.world_size, rank=gpu)
    torch.cuda.set_device(gpu)
    model = nn.Linear(10, 10).cuda(gpu)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
    sampler = torch.utils.data.distributed.DistributedSampler(args.train_set)
    loader = torch.utils.data.DataLoader(args.train_set, batch_size=32, sampler=sampler)
    val_loader = torch.utils.data.DataLoader(args.val_set, batch_size=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.cuda(gpu)), y.cuda(gpu))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if gpu == 0:
            with torch.no_grad():
                for x, y in val_loader:
                    out = model(x.cuda(gpu))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    class A: pass
    args = A()
    args.world_size = 2
    mp.spawn(train, nprocs=2, args=(args,))
