import os
import torch
from torch.distributed import init_process_group, destroy_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, save_every):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.model = DDP(model.to(self.local_rank), device_ids=[self.local_rank])
        self.save_every = save_every

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, "snapshot.pt")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            if epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def main():
    init_process_group(backend="nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    Trainer(torch.nn.Linear(20, 1), 1).train(3)
    destroy_process_group()


if __name__ == "__main__":
    main()
