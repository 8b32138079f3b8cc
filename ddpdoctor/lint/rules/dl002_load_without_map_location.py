"""DL002: torch.load without map_location in a distributed script."""
from __future__ import annotations

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.module import kwarg
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


@rule("DL002", "torch.load without map_location in a distributed script", severity=Severity.WARNING, fix="unsafe")
def load_without_map_location(ctx: Context):
    """## What it checks
    `torch.load(path)` with no `map_location` in a script that runs as several processes.

    ## Why it matters
    Without `map_location`, tensors go back to the device they were saved from — usually `cuda:0`
    (rank 0 saved them). Every rank then allocates the whole checkpoint on GPU 0: an extra CUDA
    context per rank and out-of-memory on GPU 0 at resume time (pytorch/examples#1078, pytorch#23138).

    ## Fix
    Load onto the CPU (`load_state_dict` copies into the model's device), or onto this rank's device:
    `torch.load(path, map_location="cpu")` or `map_location=f"cuda:{local_rank}"`.
    `--unsafe-fixes` writes `map_location="cpu"` (unsafe: code that uses the loaded tensors directly
    on a GPU must move them).
    """
    if not ctx.group.distributed:
        return
    for mod, call in ctx.calls("torch.load"):
        if kwarg(call, "map_location") is None and len(call.args) < 2 \
                and not any(k.arg is None for k in call.keywords):  # **kwargs may carry map_location
            arg = mod.source(call.args[0]) if call.args else "?"
            yield ctx.finding("DL002", mod, call,
                              f"torch.load({arg}) has no map_location: if the file holds CUDA tensors, every rank "
                              "restores them onto the GPU they were saved from (usually cuda:0); a file saved "
                              "from CPU tensors is safe (a static check cannot tell which)",
                              'pass map_location="cpu" (or this rank\'s device)',
                              f'torch.load({arg}, map_location="cpu")')
