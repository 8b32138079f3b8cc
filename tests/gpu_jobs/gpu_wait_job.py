"""A 2-rank torchrun job for tests/test_device_gpu.py, one GPU: rank 0 computes on cuda:0 and reads its loss
with `.item()` every step, rank 1 stays on the CPU; they meet in a Gloo all_reduce each step.

Each step rank 0 keeps the GPU busy for about GPU_JOB_STEP_MS (torch.cuda._sleep, a kernel that spins
for a number of clock cycles), so its main thread spends most of the step spinning in the driver at the
`.item()` line and leaves it every step. Once FAULT_FILE exists, rank 0's next kernel never ends
(2**60 cycles: years) and its `.item()` waits for ever; rank 1 then waits in its next all_reduce.
Prints `ready RANK`, `step N` every 10 steps, `hang_at T` (time.monotonic()) as the endless kernel starts.
"""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
fault = os.environ.get("FAULT_FILE", "")
x = torch.ones(1024)
if rank == 0:
    torch.cuda.set_device(0)
    g = torch.ones(1 << 20, device="cuda")
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    torch.cuda._sleep(10 ** 8)
    torch.cuda.synchronize()
    cycles_per_ms = 10 ** 8 / max((time.monotonic() - t0) * 1000, 1e-3)
    step_cycles = int(cycles_per_ms * float(os.environ.get("GPU_JOB_STEP_MS", "200")))
print(f"ready {rank}", flush=True)
step = 0
while True:
    dist.all_reduce(x)  # LINE_ALLREDUCE
    if rank == 0:
        if fault and os.path.exists(fault):
            print(f"hang_at {time.monotonic():.3f}", flush=True)
            torch.cuda._sleep(1 << 60)
        else:
            torch.cuda._sleep(step_cycles)
        loss = (g * 2).sum().item()  # LINE_ITEM
    step += 1
    if step % 10 == 0:
        print(f"step {step}", flush=True)
