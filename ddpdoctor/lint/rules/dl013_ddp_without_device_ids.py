"""DL013: DDP(model) on CUDA with no device_ids and no bound device."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.facts import DDP_NAMES
from ddpdoctor.lint.module import kwarg
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


def multi_device_classes(ctx: Context) -> set[str]:
    """Local classes that place their parts on two or more devices (`self.a.to(dev0)`, `.to(dev1)`):
    a model split over GPUs, which DDP must get without device_ids (torch DDP docs, "multi-device modules")."""
    out = set()
    for m in ctx.group.modules:
        for name, cls in m.classes.items():
            devs = set()
            for n in ast.walk(cls):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("to", "cuda") \
                        and n.args and not isinstance(n.args[0], ast.Attribute):
                    devs.add(m.source(n.args[0]))
            if len(devs) >= 2:
                out.add(name)
    return out


def _wrapped_class(mod, call, scope) -> str | None:
    if not call.args:
        return None
    a = call.args[0]
    while isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr in ("to", "cuda"):
        a = a.func.value
    if isinstance(a, ast.Call) and isinstance(a.func, ast.Name):
        return a.func.id
    if isinstance(a, ast.Name):
        for v in scope.assigned(a.id, call.lineno):
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name):
                return v.func.id
    return None


@rule("DL013", "DDP(model) on CUDA without device_ids and no bound device", severity=Severity.WARNING)
def ddp_without_device_ids(ctx: Context):
    """## What it checks
    `DistributedDataParallel(model)` without `device_ids`, in a script that uses CUDA and never binds a
    device (`torch.cuda.set_device`, `init_process_group(device_id=)`, `CUDA_VISIBLE_DEVICES`). A model
    split over two or more GPUs (a local class that moves its parts to different devices) must be
    given no `device_ids` and is left alone.

    ## Why it matters
    With neither, DDP and NCCL work on "the current device", GPU 0, for every rank: parameters on one
    GPU and communicators on another, or every rank's buckets on GPU 0.

    ## Fix
    Bind the device and name it: `torch.cuda.set_device(local_rank)`, then
    `DDP(model.to(local_rank), device_ids=[local_rank])`.
    """
    g = ctx.group
    if g.binds_anywhere or not g.uses_cuda:
        return
    split = None
    for mod, call in ctx.calls(*DDP_NAMES):
        if kwarg(call, "device_ids") is None and len(call.args) < 2:
            split = multi_device_classes(ctx) if split is None else split
            if _wrapped_class(mod, call, ctx.scope(mod, call)) in split:
                continue
            yield ctx.finding("DL013", mod, call,
                              f"{mod.source(call, 60)} has no device_ids and no device is bound: every rank's DDP "
                              "works on GPU 0",
                              "torch.cuda.set_device(local_rank); DDP(model, device_ids=[local_rank])")
