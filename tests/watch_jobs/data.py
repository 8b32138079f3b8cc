"""What tests/watch_jobs/train.py and ddp_train.py share: the fault file they read every step, their data
(a Dataset whose DataLoader worker can be made to hang) and the per-step compute a fault slows down.

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
