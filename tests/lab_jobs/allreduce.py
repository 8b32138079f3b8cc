"""Lab proof job: one gloo all_reduce, launched by torchrun on every lab node.

Env: LAB_PG_TIMEOUT (seconds, default 15) -> init_process_group(timeout=...).
Prints "ALLREDUCE OK rank=R world=W sum=S host=H" on success; exits 3 on a wrong sum.
"""
import datetime
import os
import socket
import sys
import time

t0 = time.monotonic()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

timeout = float(os.environ.get("LAB_PG_TIMEOUT", "15"))
host = socket.gethostname()
print(f"LAB worker start host={host} MASTER_ADDR={os.environ.get('MASTER_ADDR')} "
      f"MASTER_PORT={os.environ.get('MASTER_PORT')} RANK={os.environ.get('RANK')} "
      f"GLOO_SOCKET_IFNAME={os.environ.get('GLOO_SOCKET_IFNAME')}", flush=True)
t1 = time.monotonic()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
t2 = time.monotonic()
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
expected = world * (world + 1) / 2
if x.item() != expected:
    print(f"ALLREDUCE MISMATCH rank={rank} got={x.item()} expected={expected}", flush=True)
    sys.exit(3)
print(f"ALLREDUCE OK rank={rank} world={world} sum={x.item():g} host={host} "
      f"import={t1 - t0:.2f}s init={t2 - t1:.2f}s allreduce={time.monotonic() - t2:.2f}s", flush=True)
dist.destroy_process_group()
