"""DDP with a head that does not contribute to the loss (DDP_UNUSED_PARAMETERS)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from common import init  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.aux_head = nn.Linear(8, 2)  # only used when aux=True

    def forward(self, x, aux=False):
        h = self.body(x)
        return self.aux_head(h) if aux else h


rank, world = init()
model = DDP(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(4, 8)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
