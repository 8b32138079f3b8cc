"""What tests/watch_jobs/train.py and ddp_train.py share: the fault file they read every step, their data
(a Dataset whose DataLoader worker can be made to hang), the per-step compute a fault slows down, and the
step clock (the healthy step time a `lag` fault is a fraction of, the progress lines the benchmark reads).

A plain module beside the jobs: torchrun and srun start `python .../train.py`, whose directory is first on
sys.path, so `import data` finds this file wherever the job is started from. The lines asserted carry
`# LINE_...` (tests/watchlab.py line_of).

FAULT_FILE holds `KIND:RANK[:VALUE]` and is replaced atomically by the test (tests/watchlab.py TrainJob.fault):
`sleep:R`, `other:R`, `loader:R`, `slow:R:FACTOR`, `lag:R:FRACTION`.
"""
import os
import time

import torch

FAULT_FILE = os.environ.get("FAULT_FILE", "")
WORK = int(os.environ.get("TRAIN_WORK", "6"))  # matmuls per step in augment_batch: the compute to slow down


def fault():
    """(kind, rank, value) of the fault in FAULT_FILE, (None, None, 1.0) when there is none; value 1.0 when the
    spec gives none."""
    try:
        with open(FAULT_FILE) as f:
            parts = f.read().strip().split(":")
    except OSError:
        return None, None, 1.0
    if len(parts) < 2:
        return None, None, 1.0
    return parts[0], int(parts[1]), float(parts[2]) if len(parts) > 2 else 1.0


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        kind, who, _ = fault()
        if kind == "loader" and who == int(os.environ["RANK"]):
            time.sleep(3600)  # LINE_LOADER
        return torch.randn(64)


def augment_batch(x, factor=1.0, extra_s=0.0):
    """WORK * factor matmuls, then more for extra_s seconds of wall time (a `lag` fault)."""
    w = torch.ones(256, 256) / 256
    y = x.repeat(1, 4)
    for _ in range(int(WORK * factor)):
        y = torch.tanh(y @ w)  # LINE_AUGMENT
    spin_end = time.monotonic() + extra_s
    while time.monotonic() < spin_end:
        y = torch.tanh(y @ w)  # LINE_LAG
    return y[:, :64]


def batches():
    """The batches, from one DataLoader worker process (a `loader` fault hangs it), 4 prefetched."""
    return iter(torch.utils.data.DataLoader(Data(), batch_size=256, num_workers=1, prefetch_factor=4))


class StepClock:
    """The step count and the healthy step time (a moving average over the steps with no fault), what `lag`
    is a fraction of; every 20 steps a line `rank R step N at T` (benchmarks/bench_watch.py reads the job's
    own step time from them)."""

    def __init__(self, rank):
        self.rank, self.step, self.step_s, self._t = rank, 0, None, time.monotonic()

    def tick(self, faulted):
        self.step += 1
        t, self._t = self._t, time.monotonic()
        if not faulted:
            self.step_s = (self._t - t) if self.step_s is None else 0.98 * self.step_s + 0.02 * (self._t - t)
        if self.step % 20 == 0:
            print(f"rank {self.rank} step {self.step} at {time.monotonic():.1f}", flush=True)
