"""DL004: rendezvous values hard-coded in a script meant for a launcher."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.facts import INIT, LAUNCHER_VARS
from ddpdoctor.lint.module import Module, const_str, kwarg
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity

RDZV_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def _guarded_by_key(mod: Module, node: ast.AST, key: str) -> bool:
    """Inside an `if` (or an elif chain) that asks whether a launcher variable is set: a fallback."""
    p = mod.parents.get(node)
    while p is not None and not isinstance(p, ast.Module):
        if isinstance(p, ast.If) and any(const_str(n) in (key, *LAUNCHER_VARS, *RDZV_VARS) for n in ast.walk(p.test)):
            return True
        p = mod.parents.get(p)
    return False


@rule("DL004", "Rendezvous values hard-coded in a script meant for a launcher", severity=Severity.ERROR)
def hardcoded_rendezvous(ctx: Context):
    """## What it checks
    In a script written for torchrun/srun (it reads `LOCAL_RANK`/`RANK`/`WORLD_SIZE`, or calls
    `init_process_group()` without a rank, and starts no processes itself): literal assignments to
    `os.environ["MASTER_ADDR"|"MASTER_PORT"|"RANK"|"WORLD_SIZE"|"LOCAL_RANK"]`, and
    `init_process_group(init_method="tcp://host:port", rank=0, world_size=2)` with literals — also
    literals that reach `rank=`/`world_size=` through a helper's parameters (`setup(0, 2)`).
    Scripts that start their own workers with `mp.spawn` are single-node by construction and exempt.

    ## Why it matters
    The launcher already exported the right values for every node. Overwriting them with
    `localhost`/a fixed port makes each node rendezvous with itself: the job hangs until the timeout
    on the second node, or two jobs on one host collide on the port ("EADDRINUSE").

    ## Fix
    Delete the assignment and let torchrun/srun provide the values (`--rdzv-endpoint`,
    `--master-addr`), or only set a default: `os.environ.setdefault("MASTER_PORT", "29500")`.
    """
    g = ctx.group
    if not g.launcher_style:
        return
    for mod in g.modules:
        for node in mod.nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and mod.qualname(t.value) == "os.environ":
                        k = const_str(t.slice)
                        if k in RDZV_VARS and not _guarded_by_key(mod, node, k):
                            yield ctx.finding("DL004", mod, node,
                                              f"os.environ[{k!r}] = {node.value.value!r} overrides the value "
                                              "torchrun/srun exported for this node",
                                              "delete it (or use os.environ.setdefault)",
                                              f"os.environ.setdefault({k!r}, {str(node.value.value)!r})")
    for mod, call in ctx.calls(INIT):
        im = const_str(kwarg(call, "init_method"))
        if im and im.startswith("tcp://"):
            yield ctx.finding("DL004", mod, call, f"init_method={im!r} is hard-coded: every node dials that address",
                              'use init_method="env://" (the launcher\'s MASTER_ADDR/MASTER_PORT)')
        scope = ctx.scope(mod, call)
        for k in ("rank", "world_size"):
            v = kwarg(call, k)
            if isinstance(v, ast.Constant) and isinstance(v.value, int):
                yield ctx.finding("DL004", mod, call, f"init_process_group({k}={v.value}) is hard-coded",
                                  f"drop {k}= (torchrun exports it) or read it from the environment")
            elif isinstance(v, ast.Name) and ctx.values.rank_kind(mod, v, scope) == "literal":
                yield ctx.finding("DL004", mod, call,
                                  f"init_process_group({k}={v.id}): every caller passes a number written in the "
                                  "code, not the launcher's value",
                                  f"drop {k}= (torchrun exports it) or read it from the environment")
