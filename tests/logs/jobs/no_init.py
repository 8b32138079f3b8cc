"""A script that uses torch.distributed without init_process_group (DEFAULT_PG_NOT_INITIALIZED)."""
import torch
import torch.distributed as dist

print("starting training", flush=True)
t = torch.ones(1)
dist.all_reduce(t)
