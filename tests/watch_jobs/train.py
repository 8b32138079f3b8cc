"""A small Gloo training loop for `ddpdoctor watch`'s lab tests: faults are injected mid-run by writing
FAULT_FILE (`sleep:R`, `other:R`, `loader:R`, `slow:R:FACTOR`, `lag:R:FRACTION`); the lines asserted carry
`# LINE_...`. `slow` multiplies rank R's matmuls; `lag` makes rank R compute FRACTION of the healthy step time
more every step (a wall-clock spin of matmuls, measured against the step time before the fault), so
`lag:1:0.1` is "+10 % step time" whatever the machine's load.

Each step: a batch from a DataLoader (one worker process per rank), forward/backward of a small MLP,
the gradients all-reduced explicitly (as DDP does, in one bucket), an SGD step. Runs TRAIN_SECONDS.
The fault file's reader, the Dataset (`loader`) and augment_batch (`slow`, `lag`) are in data.py, shared
with ddp_train.py.
"""
import os
import time

import torch
import torch.distributed as dist

from data import StepClock, augment_batch, batches, fault  # beside this file: the fault file, the data, the compute

dist.init_process_group("gloo")
rank = dist.get_rank()
if os.environ.get("TRAIN_DEBUG_SERVER"):  # torch's debug server: watch reads each rank's sequence numbers
    from torch.distributed.debug import start_debug_server
    try:
        start_debug_server(port=int(os.environ["TRAIN_DEBUG_SERVER"]))
    except ImportError:  # rank 0's HTML frontend needs extra packages; the worker servers are up already
        pass
SECONDS = float(os.environ.get("TRAIN_SECONDS", "60"))
DEVICE_S = float(os.environ.get("TRAIN_DEVICE_S", "0.03"))  # a blocked phase per step, as a GPU kernel's wait
torch.manual_seed(rank)


model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = batches()
print(f"ready {rank}", flush=True)
end = time.monotonic() + SECONDS
clock = StepClock(rank)
while True:
    kind, who, factor = fault()
    mine = who == rank
    x = next(loader)
    x = augment_batch(x, factor if kind == "slow" and mine else 1.0,
                      factor * clock.step_s if kind == "lag" and mine and clock.step_s else 0.0)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    if kind == "sleep" and mine:
        time.sleep(3600)  # LINE_SLEEP
    # the last element votes to stop: every rank leaves the loop after the same step
    grads = torch.cat([p.grad.flatten() for p in model.parameters()] + [torch.tensor([float(time.monotonic() > end)])])
    if kind == "other" and mine:
        dist.broadcast(grads, 0)  # LINE_OTHER
    dist.all_reduce(grads)  # LINE_ALLREDUCE
    if grads[-1] > 0:
        break
    opt.step()
    clock.tick(faulted=kind is not None)
    time.sleep(DEVICE_S)  # LINE_DEVICE
print(f"done {rank} steps={clock.step}", flush=True)
dist.destroy_process_group()
