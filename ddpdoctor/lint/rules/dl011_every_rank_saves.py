"""DL011: every rank (or one per node) writes the same checkpoint file."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.facts import Scope
from ddpdoctor.lint.module import Module, target_key
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


def _path_is_per_rank(mod: Module, call: ast.Call) -> bool:
    if len(call.args) < 2:
        return True  # no path we can judge
    p = call.args[1]
    for n in ast.walk(p):
        if isinstance(n, (ast.Name, ast.Attribute)) and "rank" in (n.id if isinstance(n, ast.Name) else n.attr).lower():
            return True
    key = target_key(p)
    if key:
        vals = list(Scope(mod, mod.function_of(call)).assigned(key))
        w = mod.enclosing(call, (ast.With, ast.AsyncWith))
        while w is not None:  # with io.BytesIO() as f: torch.save(obj, f)
            vals += [i.context_expr for i in w.items if i.optional_vars is not None and target_key(i.optional_vars) == key]
            w = mod.enclosing(w, (ast.With, ast.AsyncWith))
        for v in vals:
            if isinstance(v, ast.Call) and mod.qualname(v.func) in ("io.BytesIO", "BytesIO"):
                return True  # in memory: each rank its own buffer
    return False


def _guard(ctx: Context, mod: Module, node: ast.AST, depth: int = 0):
    """('global'|'local'|'other'|'unknown', test) for the nearest rank test above node, following
    callers 3 deep; (None, None) when every rank gets there."""
    p = mod.parents.get(node)
    child = node
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, ast.If) and child in p.body + p.orelse:
            r = ctx.rank_guard(mod, p.test)
            if r is not None:
                kind = ctx.values.rank_kind(mod, r, Scope(mod, mod.function_of(p)))
                n = (r.id if isinstance(r, ast.Name) else getattr(r, "attr", "")).lower()
                if kind not in ("global", "local") and "local" in n:
                    kind = "local"  # args.local_rank: an argparse default or a launcher's value, per node
                return kind if kind in ("global", "local") else "other", p.test
        child, p = p, mod.parents.get(p)
    if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if p in ctx.values.spawn_targets:
            return None, None  # every spawned process runs the worker
        if depth >= 3:
            return None, None  # three callers up and still no rank test: every rank gets here
        # the calls that run this function (resolved: `torch.save(...)` is not a call of a method `save`)
        callers = [(m, c) for m, c, _ in ctx.values.call_sites(p)]
        if not callers:  # dispatch the analysis cannot resolve: any same-named call that is not a library's
            callers = [(m, c) for m, c, q in ctx.group.calls
                       if ((isinstance(c.func, ast.Name) and c.func.id == p.name)
                           or (isinstance(c.func, ast.Attribute) and c.func.attr == p.name))
                       and q.split(".")[0] not in m.aliases]
        if not callers:
            return "unknown", None
        guards = [_guard(ctx, m, c, depth + 1) for m, c in callers]
        if any(gd[0] is None for gd in guards):
            return None, None
        return guards[0]
    if isinstance(p, ast.Module):
        return None, None
    return "unknown", None


@rule("DL011", "Every rank writes the same checkpoint file", severity=Severity.WARNING)
def every_rank_saves(ctx: Context):
    """## What it checks
    `torch.save(obj, path)` in a distributed script where no rank test guards the call (in its
    function, or at every call site of that function, three levels up; a function handed to
    `mp.spawn` runs in every process), and the path does not contain a rank. In a torchrun/srun
    script, a guard on the *local* rank (`LOCAL_RANK == 0`) is reported too: it lets one process per
    node write the same path — unless the script is single-node by construction (its world size is
    `torch.cuda.device_count()`).

    ## Why it matters
    N processes writing one file at once interleave or truncate it: a checkpoint that fails to load
    ("PytorchStreamReader failed reading zip archive") exactly when you need it. On a shared
    filesystem a local-rank guard still leaves one writer per node.

    ## Fix
    Save on the global rank 0 only (`if dist.get_rank() == 0:`), or write per-rank paths; use
    `torch.distributed.checkpoint` for sharded state.
    """
    g = ctx.group
    if not g.distributed:
        return
    for mod, call in ctx.calls("torch.save"):
        if _path_is_per_rank(mod, call):
            continue
        kind, test = _guard(ctx, mod, call)
        if kind is None:
            yield ctx.finding("DL011", mod, call,
                              f"{mod.source(call, 60)} runs on every rank: all of them write "
                              f"{mod.source(call.args[1], 40)} at once",
                              "save on rank 0 only: if dist.get_rank() == 0:")
        elif kind == "local" and g.launcher_style and not g.single_node:
            yield ctx.finding("DL011", mod, call,
                              f"{mod.source(call, 60)} is guarded by {mod.source(test, 40)}: one process per node "
                              f"writes {mod.source(call.args[1], 40)}",
                              "guard on the global rank: if dist.get_rank() == 0:")
