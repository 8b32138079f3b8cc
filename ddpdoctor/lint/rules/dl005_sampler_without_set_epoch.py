"""DL005: a shuffling DistributedSampler whose epoch never changes, used across epochs."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.module import Module, kwarg, target_key
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity

LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _names_of(mod: Module, node: ast.AST) -> set[str]:
    """The variables a call's result is assigned to (`sampler = ...`, `a, b = ...`)."""
    p = mod.parents.get(node)
    while isinstance(p, (ast.IfExp, ast.Call, ast.keyword)):
        p = mod.parents.get(p)
    if isinstance(p, ast.Assign):
        return {k for t in p.targets for n in ast.walk(t) if (k := target_key(n))}
    return set()


def _inside_loop(mod: Module, node: ast.AST) -> bool:
    p, child = mod.parents.get(node), node
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, LOOPS) and child is not getattr(p, "iter", None):
            return True
        child, p = p, mod.parents.get(p)
    return False


def used_across_epochs(mod: Module, call: ast.Call) -> bool | None:
    """False when the sampler's loader is visibly used once (no loop around any use); None when unknown."""
    samplers = _names_of(mod, call)
    if not samplers:
        return None
    loaders = set()
    for c in mod.calls:
        s = kwarg(c, "sampler")
        if s is not None and target_key(s) in samplers:
            got = _names_of(mod, c)
            if not got:
                return None
            loaders |= got
    if not loaders:
        return None
    uses = [n for n in mod.nodes if isinstance(n, (ast.Name, ast.Attribute)) and target_key(n) in loaders
            and isinstance(getattr(n, "ctx", None), ast.Load)]
    if any(_inside_loop(mod, u) for u in uses):
        return True
    if all(_iterated_directly(mod, u) for u in uses):
        return False
    return None  # returned, stored or handed to a function: its epochs are out of sight


def _iterated_directly(mod: Module, use: ast.AST) -> bool:
    """`for b in loader`, `for i, b in enumerate(loader)`, `tqdm(loader)`: the use is the loop's iterable."""
    node, p = use, mod.parents.get(use)
    while isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id in ("enumerate", "tqdm", "iter") \
            and node in p.args:
        node, p = p, mod.parents.get(p)
    return isinstance(p, (ast.For, ast.AsyncFor, ast.comprehension)) and p.iter is node


@rule("DL005", "DistributedSampler whose epoch never changes", severity=Severity.WARNING)
def sampler_without_set_epoch(ctx: Context):
    """## What it checks
    A `DistributedSampler` (shuffling, the default) in a script that never calls `.set_epoch(...)`,
    when its loader is used inside a loop (an epoch loop, `while True:` over the loader, a `train()`
    called per epoch). A sampler whose loader is visibly used once (evaluation, no epoch loop) is fine.

    ## Why it matters
    The sampler seeds its shuffle with `seed + epoch`. Without `set_epoch(epoch)` each epoch replays
    the same order on every rank: the model sees the same batches in the same order every epoch,
    which silently hurts convergence (documented in torch.utils.data.distributed).

    ## Fix
    Call `sampler.set_epoch(epoch)` at the start of every epoch, before iterating the DataLoader
    (`loader.sampler.set_epoch(epoch)` when the sampler is only reachable through the loader).
    """
    g = ctx.group
    if g.has_method_call("set_epoch"):
        return
    for mod, call, q in g.calls:
        if q.endswith("DistributedSampler") and not q.startswith("self."):
            sh = kwarg(call, "shuffle")
            if isinstance(sh, ast.Constant) and sh.value is False:
                continue
            if used_across_epochs(mod, call) is False:
                continue
            yield ctx.finding("DL005", mod, call,
                              f"{mod.source(call, 60)} shuffles, but nothing calls set_epoch(): every epoch "
                              "repeats the same order",
                              "call sampler.set_epoch(epoch) at the start of each epoch")
