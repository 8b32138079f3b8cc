"""DataLoader workers hand large batches through a small /dev/shm (DATALOADER_SHM_BUS_ERROR)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from common import init  # noqa: E402


class Images(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((4, 1024, 1024), float(i))  # 16 MB per sample


rank, world = init()
loader = DataLoader(Images(), batch_size=2, num_workers=2)
for step, batch in enumerate(loader):
    print(f"rank {rank} step {step} batch {tuple(batch.shape)}", flush=True)
