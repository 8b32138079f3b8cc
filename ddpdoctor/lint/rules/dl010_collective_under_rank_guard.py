"""DL010: a collective or DDP forward that only some ranks run (a hang)."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.facts import COLLECTIVES, DDP_NAMES, Scope
from ddpdoctor.lint.module import Module, target_key
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


def ddp_vars(mod: Module, scope_node) -> set[str]:
    """Names/self attributes assigned a DistributedDataParallel(...) in a function or its class."""
    cls = mod.class_of(scope_node) if scope_node is not None else None
    out = set()
    for key, entries in mod.assigns.items():
        for v, fn, c in entries:
            if isinstance(v, ast.Call) and mod.qualname(v.func) in DDP_NAMES:
                if fn is scope_node or (key.startswith("self.") and cls is not None and c is cls) \
                        or (scope_node is None):
                    out.add(key)
    return out


def module_ddp_vars(mod: Module, fn) -> set[str]:
    """Module-level DDP models a function reads as globals (not rebound in it)."""
    out = set()
    for key, entries in mod.assigns.items():
        if any(f is None and isinstance(v, ast.Call) and mod.qualname(v.func) in DDP_NAMES for v, f, _ in entries):
            if not any(f is fn for _, f, _ in entries):
                out.add(key)
    return out


def collective_in(ctx, mod: Module, stmts, ddp: set[str], depth: int, func):
    """The first collective, DDP forward, or call into a local helper doing one, in stmts."""
    for stmt in stmts:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            q = mod.qualname(node.func)
            if q in COLLECTIVES:
                return node, f"{q.rsplit('.', 1)[-1]}()"
            if target_key(node.func) in ddp:
                return node, f"the DistributedDataParallel forward {mod.source(node, 50)}"
            if depth >= 2:
                continue
            target = ctx.walker.resolve(mod, node, func, Scope(mod, func))
            if target is None:
                continue
            tmod, tfn = target
            inner = set(ddp_vars(tmod, tfn)) | module_ddp_vars(tmod, tfn)
            pos = [p.arg for p in tfn.args.posonlyargs + tfn.args.args]
            off = 1 if pos and pos[0] == "self" and isinstance(node.func, ast.Attribute) else 0
            for i, a in enumerate(node.args):
                if target_key(a) in ddp and i + off < len(pos):
                    inner.add(pos[i + off])
            if tmod is mod and off:
                inner |= {d for d in ddp if d.startswith("self.")}
            got = collective_in(ctx, tmod, tfn.body, inner, depth + 1, tfn)
            if got:
                return node, f"{mod.source(node.func)}(), which runs {got[1]} (line {got[0].lineno})"
    return None


@rule("DL010", "A collective or DDP forward that only some ranks run", severity=Severity.ERROR)
def collective_under_rank_guard(ctx: Context):
    """## What it checks
    A collective (`all_reduce`, `broadcast`, `all_gather`, ...), a forward through the
    DistributedDataParallel-wrapped model, or a call into a local helper that does one, inside
    `if rank == 0:` (any test comparing a rank to a constant, `is_main_process()`, or a value the
    analysis knows is a rank, such as an `mp.spawn` worker's first parameter), with no matching
    collective in the `else` branch. `barrier()` is exempt (the paired `if rank != 0: barrier()`
    ... `if rank == 0: barrier()` idiom is correct).

    ## Why it matters
    A collective completes only when every rank joins it. Rank 0 waits forever for the others, which
    are already at the next one: the job hangs until the NCCL watchdog kills it (pytorch#54059). A DDP
    forward syncs buffers (broadcast_buffers=True) and so counts as a collective.

    ## Fix
    Run the collective on every rank and only *print* or *save* on rank 0; for rank-0-only
    evaluation use the unwrapped model: `model.module(x)`.
    """
    g = ctx.group
    if not g.distributed:
        return
    for mod in g.modules:
        for node in mod.nodes:
            if not isinstance(node, ast.If) or ctx.rank_guard(mod, node.test) is None:
                continue
            func = mod.function_of(node)
            ddp = ddp_vars(mod, func) | (module_ddp_vars(mod, func) if func is not None else set())
            got = collective_in(ctx, mod, node.body, ddp, 0, func)
            if got is None:
                continue
            if node.orelse and collective_in(ctx, mod, node.orelse, ddp, 0, func) is not None:
                continue
            call, what = got
            yield ctx.finding("DL010", mod, call,
                              f"{what} runs only when {mod.source(node.test, 50)}: the other ranks never join it "
                              "and the job hangs",
                              "run it on every rank (or evaluate the unwrapped model.module on rank 0)")
