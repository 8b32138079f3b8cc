"""A small DistributedDataParallel (Gloo) training loop for `ddpdoctor watch`'s straggler lab test and
benchmark: as most real jobs do, it makes no collective of its own per step — DDP all-reduces the
gradients inside `loss.backward()` (its reducer's hooks; the last bucket is waited for at the end of
backward, torch/csrc/distributed/c10d/reducer.cpp finalize_backward), so the ranks that wait for a
straggler wait inside backward, where a Python stack looks the same whether autograd computes or the
reducer waits. Every 50 steps one `all_reduce` votes whether to stop (a job's occasional logging
collective), so that every rank leaves after the same step.

Faults by writing FAULT_FILE: `lag:R:FRACTION` makes rank R compute FRACTION of the healthy step time
more every step (a wall-clock spin of matmuls before its forward: data.py's augment_batch, shared with train.py).
"""
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from data import StepClock, augment_batch, batches, fault  # shared with train.py: the fault file, the data, the compute

dist.init_process_group("gloo")
rank = dist.get_rank()
SECONDS = float(os.environ.get("TRAIN_SECONDS", "60"))
DEVICE_S = float(os.environ.get("TRAIN_DEVICE_S", "0.03"))
torch.manual_seed(rank)


model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(),
                                                    torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                                    torch.nn.Linear(512, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = batches()
print(f"ready {rank}", flush=True)
end = time.monotonic() + SECONDS
clock = StepClock(rank)
while True:
    kind, who, frac = fault()
    x = augment_batch(next(loader), 1.0, frac * clock.step_s if kind == "lag" and who == rank and clock.step_s else 0.0)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # LINE_BACKWARD: DDP all-reduces the gradients in here
    opt.step()
    clock.tick(faulted=kind is not None)
    if clock.step % 50 == 0:
        stop = torch.tensor([float(time.monotonic() > end)])
        dist.all_reduce(stop)  # LINE_VOTE
        if stop.item() > 0:
            break
    time.sleep(DEVICE_S)  # LINE_DEVICE
print(f"done {rank} steps={clock.step}", flush=True)
dist.destroy_process_group()
