"""A one-GPU torchrun job for tests/test_device_gpu.py: holds GPU_JOB_GIB GiB on its GPU and loops on
all_reduce (NCCL on a GPU, Gloo where there is none, so the script itself can be tried on CPU).
Prints `step N` after each step; with GPU_JOB_DUMP set it writes torch's flight-recorder trace there
after GPU_JOB_DUMP_AT steps, the bytes the watchdog writes on a timeout. GPU_JOB_DEBUG_SERVER=<port> starts
torch's debug server; while the file GPU_JOB_STALL exists each step first queues a GPU kernel that spins for a
minute (torch.cuda._sleep), so the all_reduce is enqueued behind it and does not complete while the main
thread spins in torch.cuda.synchronize: NCCL's hang as seen from the CPU."""
import os
import sys
import time

import torch
import torch.distributed as dist

gpu = torch.cuda.is_available()
dist.init_process_group("nccl" if gpu else "gloo")
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if gpu else torch.device("cpu")
if gpu:
    torch.cuda.set_device(dev)
if os.environ.get("GPU_JOB_DEBUG_SERVER"):
    from torch.distributed.debug import start_debug_server
    try:
        start_debug_server(port=int(os.environ["GPU_JOB_DEBUG_SERVER"]), start_method="spawn")
    except ImportError:  # the frontend's extra packages: the worker server is up already
        pass
stall = os.environ.get("GPU_JOB_STALL", "")
hold = torch.empty(int(float(os.environ.get("GPU_JOB_GIB", "1")) * 2**30), dtype=torch.uint8, device=dev)
x = torch.ones(1 << 16, device=dev)
dump, dump_at = os.environ.get("GPU_JOB_DUMP"), int(os.environ.get("GPU_JOB_DUMP_AT", "20"))
step = 0
while True:
    if gpu and stall and os.path.exists(stall):
        torch.cuda._sleep(int(60 * 2e9))  # about a minute of GPU clock cycles
    dist.all_reduce(x)
    if gpu:
        torch.cuda.synchronize()
    step += 1
    print(f"step {step}", flush=True)
    if dump and step == dump_at:
        import torch._C._distributed_c10d as c10d  # what the NCCL watchdog calls on a timeout; Gloo's recorder
        with open(dump + ".tmp", "wb") as f:
            f.write(c10d._dump_nccl_trace() if gpu else c10d._dump_fr_trace())
        os.replace(dump + ".tmp", dump)
        print("dumped", flush=True)
    time.sleep(0.05)
