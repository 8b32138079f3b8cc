import torch
import torch.distributed as dist
from torch.utils.data import DataLoader


def train(opt, model, dataset, batch_size):
    device = torch.device("cuda:0")
    model = model.to(device)
    if torch.cuda.device_count() > 1:
        dist.init_process_group(backend=opt.backend, init_method=opt.dist_url, world_size=opt.world_size, rank=opt.rank)
        model = torch.nn.parallel.DistributedDataParallel(model)
        sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    else:
        sampler = None
    dataloader = DataLoader(dataset, batch_size=batch_size, num_workers=opt.num_workers, shuffle=True,
                            pin_memory=True, sampler=sampler)
    for epoch in range(opt.epochs):
        for imgs, targets in dataloader:
            loss = model(imgs.to(device)).sum()
            loss.backward()
