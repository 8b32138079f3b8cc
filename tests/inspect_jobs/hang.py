"""A Gloo job that hangs in a known place (HANG_MODE): the lines below are asserted by tests/test_inspect_torchjob.py."""
import os
import time

import torch
import torch.distributed as dist

if "OMPI_COMM_WORLD_RANK" in os.environ:  # under mpirun: the rank only in Open MPI's variables (set here, not in /proc)
    os.environ.setdefault("RANK", os.environ["OMPI_COMM_WORLD_RANK"])
    os.environ.setdefault("WORLD_SIZE", os.environ["OMPI_COMM_WORLD_SIZE"])
dist.init_process_group("gloo")
r = dist.get_rank()
if os.environ.get("HANG_DEBUG_SERVER"):  # torch's debug server: each rank's worker server registers in the store
    from torch.distributed.debug import start_debug_server
    try:
        start_debug_server(port=int(os.environ["HANG_DEBUG_SERVER"]))
    except ImportError:  # rank 0's HTML frontend needs extra packages; the worker servers are up already
        pass
t = torch.ones(4)
mode = os.environ.get("HANG_MODE", "other")
odd = int(os.environ.get("HANG_RANK", "1"))
steps = int(os.environ.get("HANG_STEPS", "3"))
for step in range(steps):
    dist.all_reduce(t)  # LINE_LOOP
    if mode == "progress":
        time.sleep(0.05)
print(f"ready {r}", flush=True)
if r == odd and mode == "other":
    dist.broadcast(t, 0)  # LINE_ODD_BROADCAST
elif r == odd and mode == "sleep":
    time.sleep(3600)  # LINE_ODD_SLEEP
if mode == "idle":  # no collective pending: a rank killed now leaves the others running (Gloo notices only in I/O)
    time.sleep(3600)  # LINE_IDLE
dist.all_reduce(t)  # LINE_WAIT
dist.destroy_process_group()  # without it Gloo may abort at exit ("terminate called without an active exception")
print(f"done {r}", flush=True)
