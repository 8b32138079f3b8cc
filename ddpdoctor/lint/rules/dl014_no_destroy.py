"""DL014: a process group that is never destroyed."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.facts import DESTROY, INIT
from ddpdoctor.lint.module import Module, is_main_guard, kwarg
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


def _is_script(mod: Module) -> bool:
    for s in mod.tree.body:
        if isinstance(s, ast.If) and is_main_guard(s.test):
            return True
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            return True
    return False


def _destroys_default(mod: Module, call: ast.Call) -> bool:
    """destroy_process_group() or (group=None / dist.group.WORLD) ends the default group; a sub-group
    argument ends only that one (torch.distributed.destroy_process_group's docstring)."""
    arg = call.args[0] if call.args else kwarg(call, "group")
    if arg is None or (isinstance(arg, ast.Constant) and arg.value is None):
        return True
    return mod.qualname(arg).endswith("group.WORLD")


@rule("DL014", "No destroy_process_group()", severity=Severity.WARNING)
def no_destroy(ctx: Context):
    """## What it checks
    A script (it has a `__main__` block or top-level calls) that calls `init_process_group` but
    never `destroy_process_group()` (in itself or in the local modules it imports, also a package
    beside it such as `utils/` or the script's own package). Destroying only a sub-group
    (`destroy_process_group(cpu_pg)`) leaves the default group alive.

    ## Why it matters
    torch >= 2.4 warns "process group has NOT been destroyed before we destruct ProcessGroupNCCL";
    NCCL's communicators are then torn down at interpreter exit, where a rank that exits early can
    leave the others hanging in their last collective and the exit code is lost.

    ## Fix
    End the worker with `dist.destroy_process_group()` (in a `finally:` so errors also clean up).
    """
    g = ctx.group
    if not _is_script(g.main) or any(_destroys_default(m, c) for m, c in ctx.calls(DESTROY)):
        return
    inits = ctx.calls(INIT)
    if inits:
        mod, call = inits[0]
        yield ctx.finding("DL014", mod, call,
                          "init_process_group() is never matched by destroy_process_group()",
                          "call dist.destroy_process_group() when the worker ends", "dist.destroy_process_group()")
