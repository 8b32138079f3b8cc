"""Shared set-up of the corpus jobs: init the Gloo process group the way a training script does."""
import datetime
import os

import torch.distributed as dist


def init(timeout_s: float | None = None) -> tuple[int, int]:
    timeout = float(timeout_s or os.environ.get("JOB_PG_TIMEOUT", "20"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    return dist.get_rank(), dist.get_world_size()
