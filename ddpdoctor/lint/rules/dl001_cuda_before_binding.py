"""DL001: CUDA work on the default device before the process binds its GPU."""
from __future__ import annotations

from ddpdoctor.lint.context import BIND_FIX, Context, chain_text
from ddpdoctor.lint.facts import LAUNCHER_VARS
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


@rule("DL001", "CUDA work before the process's device is bound", severity=Severity.ERROR)
def cuda_before_binding(ctx: Context):
    """## What it checks
    In each process of a multi-process script (the torchrun/srun script's body, every function given
    to `mp.spawn` or `Process(target=)`), the first CUDA work on the *default* device — `.cuda()`,
    `.to("cuda")`, `.to(device)` where `device = torch.device("cuda")` (also
    `torch.device("cuda" if ... else "cpu")`, also when `device` is passed into a helper), a tensor
    created with `device="cuda"`, `torch.load(map_location="cuda:0")`, `torch.cuda.synchronize()`,
    iterating a `DataLoader(pin_memory=True)` — that runs before `torch.cuda.set_device(...)` (or
    `init_process_group(device_id=...)`), or with no binding at all. Calls into local helpers and
    local modules are followed.

    ## Why it matters
    Until a process binds its device, "cuda" means GPU 0. Every rank then creates a CUDA context
    (300-1000 MiB) and its tensors on GPU 0: GPU 0 runs out of memory, or NCCL finds two ranks on one
    device and hangs or fails with "Duplicate GPU detected". A `pin_memory=True` loader's pinning
    thread works on the current device too (torch/utils/data/_utils/pin_memory.py).

    ## Fix
    Bind the device first thing in every process, from the launcher's local rank:
    `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` (torchrun) or `torch.cuda.set_device(rank)`
    in an `mp.spawn` worker, then use `torch.device("cuda", local_rank)` or `.cuda()`.
    """
    g = ctx.group
    if not g.distributed:
        return
    for flow in ctx.flows:
        if not (flow.inited or flow.spawned or g.env_reads & LAUNCHER_VARS):
            continue
        ev = next((e for e in flow.events if e.kind == "work"), None)
        if ev is None:
            continue
        when = (f"before the device is bound (line {flow.bound_at})" if flow.bound_at
                else "and this process never binds its device")
        yield ctx.finding("DL001", ev.mod, ev.node,
                          f"{ev.what} puts work on GPU 0 {when}{chain_text(ev)}: every rank lands on GPU 0",
                          "bind the device first: torch.cuda.set_device(local_rank)", BIND_FIX)
