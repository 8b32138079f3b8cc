"""A 2-rank torchrun + Gloo loop whose rank 0 waits for a (fake) GPU each step: a stand-in for the
`.item()` of a CUDA tensor, for tests/test_watch_gpuwait_lab.py on a machine without a GPU.

Rank 0 calls cuStreamSynchronize of FAKE_LIBCUDA (tests/gpu_jobs/fake_libcuda.c built as libcuda.so.1),
which spins in that library for FAKE_WAIT_S each step, then does a few ms of Python, as a training
step does between its syncs. Writing `hang` into FAULT_FILE makes rank 0's next wait endless (a kernel
that never ends); rank 1 then waits in its next all_reduce. Prints `ready RANK` once, `step N` every 10
steps, `hang_at T` (time.monotonic()) as the endless wait begins.
"""
import ctypes
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
cuda = ctypes.CDLL(os.environ["FAKE_LIBCUDA"]) if rank == 0 else None
if cuda is not None:
    cuda.fake_set_wait.argtypes = [ctypes.c_double]
wait_s = float(os.environ.get("FAKE_WAIT_S", "0.3"))
fault = os.environ.get("FAULT_FILE", "")
x = torch.ones(1 << 10)
print(f"ready {rank}", flush=True)
step = 0
end = time.monotonic() + float(os.environ.get("TRAIN_SECONDS", "120"))
while time.monotonic() < end:
    step += 1
    dist.all_reduce(x)  # LINE_ALLREDUCE
    if cuda is not None:
        hang = bool(fault) and os.path.exists(fault) and open(fault).read().strip() == "hang"
        cuda.fake_set_wait(-1.0 if hang else wait_s)
        if hang:
            print(f"hang_at {time.monotonic():.3f}", flush=True)  # CLOCK_MONOTONIC: the test's clock too
        cuda.cuStreamSynchronize(None)  # LINE_SYNC
    y = sum(i * i for i in range(20000))  # the step's own Python, a few ms
    if rank == 0 and step % 10 == 0:
        print(f"step {step}", flush=True)
dist.destroy_process_group()
