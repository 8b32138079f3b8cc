"""`from ddpdoctor import setup_ddp`: the set-up `ddpdoctor smoke --fix` verifies, for your script.

Call it first thing in the training script, before anything touches CUDA:

    from ddpdoctor import setup_ddp
    ctx = setup_ddp()                       # torchrun, srun or mpirun: same call
    model = DDP(model.to(ctx.device), device_ids=ctx.device_ids)
    state = torch.load(path, map_location=ctx.device)

It does what DD401 asks for: `torch.cuda.set_device(local_rank)` before any other CUDA call,
`init_process_group(..., device_id=...)` so NCCL binds the right GPU at once, and
`torch.cuda.empty_cache()` so the caching allocator gives back what set-up code left behind.
Without it, every process that touches CUDA before set_device creates a context (about 300-500
MiB) and often tensors on GPU 0: `nvidia-smi` then shows every rank's pid on GPU 0.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import types
from typing import Any


@dataclasses.dataclass(frozen=True)
class DDPContext:
    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: Any  # torch.device

    @property
    def device_ids(self) -> list[int] | None:
        """For DistributedDataParallel(device_ids=...): the local GPU, or None on CPU."""
        return [self.local_rank] if self.device.type == "cuda" else None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_ddp(backend: str | None = None, timeout_s: float | None = None) -> DDPContext:
    """Bind this process to its GPU, then initialise the default process group.

    Reads the launcher's variables like `ddpdoctor smoke` does (torchrun, srun, mpirun); the
    backend defaults to NCCL when this process has a GPU, else Gloo.
    """
    import torch
    import torch.distributed as dist

    from ddpdoctor.launch import detect, free_port

    rank_env = detect(os.environ)
    if rank_env is None:  # a plain `python train.py`: a world of one
        rank, local, world, master, port = 0, 0, 1, "127.0.0.1", free_port()
    else:
        rank, local, world = rank_env.rank, rank_env.local_rank, rank_env.world_size
        master, port = rank_env.master_addr, rank_env.master_port
    for k, v in {"RANK": rank, "LOCAL_RANK": local, "WORLD_SIZE": world, "MASTER_ADDR": master,
                 "MASTER_PORT": port}.items():
        os.environ.setdefault(k, str(v))  # env:// reads them; srun/mpirun do not set them
    gpu = torch.cuda.is_available() and local < torch.cuda.device_count()
    if gpu:
        torch.cuda.set_device(local)  # before any other CUDA call: no context on GPU 0
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    backend = backend or ("nccl" if gpu else "gloo")
    kw: dict[str, Any] = {}
    if timeout_s is not None:
        kw["timeout"] = datetime.timedelta(seconds=timeout_s)
    if gpu and backend == "nccl":
        kw["device_id"] = device  # NCCL binds this GPU now; barrier() needs no guess
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=rank, world_size=world, **kw)
    if gpu:
        torch.cuda.empty_cache()
    return DDPContext(rank, local, world, backend, device)


class _CallableModule(types.ModuleType):
    """`import ddpdoctor.setup_ddp` binds the package attribute to this module, which shadows the
    function of the same name: calling the module calls the function, so both spellings work."""

    def __call__(self, *args, **kwargs):
        return setup_ddp(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
