"""DL012: an NCCL barrier before the process's device is bound."""
from __future__ import annotations

from ddpdoctor.lint.context import BIND_FIX, Context
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


@rule("DL012", "barrier() under NCCL before the device is bound", severity=Severity.ERROR)
def barrier_before_binding(ctx: Context):
    """## What it checks
    `dist.barrier()` (without `device_ids=`) in a process whose process group uses NCCL (a literal
    backend, an argparse default such as `--backend nccl`, or the `"nccl" if cuda else "gloo"`
    choice), before the process binds its device with `torch.cuda.set_device`,
    `init_process_group(device_id=...)`, or a `DistributedDataParallel(..., device_ids=[i])` whose
    construction already ran NCCL on that device.

    ## Why it matters
    An NCCL barrier is an all-reduce on "the current device". Unbound, every rank picks GPU 0 (or
    guesses `rank % device_count`, with a warning): ranks share a GPU, NCCL hangs or fails with
    "Duplicate GPU detected", and each rank leaves a context on GPU 0. Once DDP has broadcast its
    parameters on its device, ProcessGroupNCCL's barrier reuses that device (usedDeviceIdxs_ in
    torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp).

    ## Fix
    Call `torch.cuda.set_device(local_rank)` before the first barrier (best: before
    `init_process_group`, or pass `device_id=torch.device("cuda", local_rank)` to it), or
    `dist.barrier(device_ids=[local_rank])`.
    """
    for flow in ctx.flows:
        if flow.backend(ctx.values) != "nccl":
            continue
        for ev in flow.events:
            if ev.kind == "barrier":
                yield ctx.finding("DL012", ev.mod, ev.node,
                                  f"{ev.what} runs under NCCL before this process binds its GPU"
                                  + (f" (line {flow.bound_at})" if flow.bound_at else " (it never does)")
                                  + ": ranks may share GPU 0 and hang",
                                  "bind first: torch.cuda.set_device(local_rank)", BIND_FIX)
