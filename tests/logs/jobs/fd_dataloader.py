"""DataLoader workers hand each tensor to the trainer as a file descriptor (torch.multiprocessing's default
`file_descriptor` sharing strategy on Linux) and the trainer keeps what it receives (a cache of samples), so its
open descriptors grow until `ulimit -n` is reached (DATALOADER_OPEN_FILES_LIMIT). Run under a low limit
(`ulimit -n 256`): torch/utils/data/dataloader.py `_try_get_data` then raises "Too many open files.
Communication with the workers is no longer possible", or multiprocessing's fd passing fails first."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from common import init  # noqa: E402


class Crops(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return [torch.full((8,), float(i)) for _ in range(4)]  # four storages, four descriptors per sample


rank, world = init()
kept = []
loader = DataLoader(Crops(), batch_size=None, num_workers=2)
for step, sample in enumerate(loader):
    kept.append(sample)  # the cache holds every storage, so every received descriptor stays open
    if step % 50 == 0:
        print(f"rank {rank} step {step}", flush=True)
