"""Lab proof job for path-MTU black holes: a small gloo all_reduce, then a large one.

Env: LAB_PG_TIMEOUT (seconds, default 15) -> init_process_group(timeout=...); LAB_ALLREDUCE_MB
(default 16) -> size of the large tensor. Prints "SMALL OK ..." after the 1-element all_reduce
(rendezvous and Gloo's connections work) and "ALLREDUCE OK ..." after the large one.
"""
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

timeout = float(os.environ.get("LAB_PG_TIMEOUT", "15"))
mb = float(os.environ.get("LAB_ALLREDUCE_MB", "16"))
host = socket.gethostname()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
print(f"SMALL OK rank={rank} world={world} sum={x.item():g} host={host}", flush=True)
t0 = time.monotonic()
big = torch.full((int(mb * (1 << 20) / 4),), float(rank + 1))
dist.all_reduce(big)
expected = world * (world + 1) / 2
if big[0].item() != expected or big[-1].item() != expected:
    print(f"ALLREDUCE MISMATCH rank={rank} got={big[0].item()} expected={expected}", flush=True)
    sys.exit(3)
print(f"ALLREDUCE OK rank={rank} world={world} sum={expected:g} host={host} large={mb:g}MiB "
      f"in {time.monotonic() - t0:.2f}s", flush=True)
dist.destroy_process_group()
