"""A healthy Gloo job that loops on small all_reduces (hundreds a second) for TIGHT_SECONDS, then exits 0.

Every stack sample lands in the all_reduce line: the case that made `inspect` call a running job hung."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if os.environ.get("TIGHT_DEBUG_SERVER"):  # torch's debug server: inspect --debug-server reads the live flight recorder
    from torch.distributed.debug import start_debug_server
    try:
        start_debug_server(port=int(os.environ["TIGHT_DEBUG_SERVER"]))
    except ImportError:  # rank 0's HTML frontend needs extra packages; the worker servers are up already
        pass
t = torch.ones(int(os.environ.get("TIGHT_NUMEL", "8")))  # bigger: more of each step inside the collective
end = time.monotonic() + float(os.environ.get("TIGHT_SECONDS", "60"))
n = 0
print(f"ready {dist.get_rank()}", flush=True)
while time.monotonic() < end:
    dist.all_reduce(t)  # LINE_TIGHT
    t.fill_(1.0)
    n += 1
print(f"done {dist.get_rank()} {n} all_reduces", flush=True)
dist.destroy_process_group()
