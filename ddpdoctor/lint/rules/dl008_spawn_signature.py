"""DL008: the spawned function's parameters do not match the arguments passed."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.facts import spawn_calls
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


@rule("DL008", "Spawned function's signature does not match the args passed", severity=Severity.ERROR)
def spawn_signature(ctx: Context):
    """## What it checks
    `mp.spawn(fn, args=(...))` (or `mp.spawn(fn, (...), nprocs)`) passes the process index first,
    then `args`; `Process(target=fn, args=(...))` passes `args` only. The number of arguments is
    compared with `fn`'s positional parameters (required and optional) when `fn` is a local function
    and `args` a literal tuple.

    ## Why it matters
    A mismatch raises `TypeError: fn() missing 1 required positional argument` in every child — after
    the parent has already started them, so the failure shows up as several tracebacks at once.

    ## Fix
    Make `fn(rank, *args)` match: add the missing parameter, or the missing value to `args=(...)`.
    """
    funcs = ctx.walker._funcs
    for mod, call, q, target, args, extra in spawn_calls(ctx.group):
        if not isinstance(target, ast.Name) or target.id not in funcs:
            continue
        if args is None:
            n = 0
        elif isinstance(args, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in args.elts):
            n = len(args.elts)
        else:
            continue
        _, fn = funcs[target.id]
        a = fn.args
        pos = a.posonlyargs + a.args
        required = len(pos) - len(a.defaults)
        passed = n + extra
        if passed < required or (passed > len(pos) and a.vararg is None):
            want = f"{required}" if required == len(pos) else f"{required}-{len(pos)}"
            names = ", ".join(p.arg for p in pos)
            yield ctx.finding("DL008", mod, call,
                              f"{target.id}({names}) takes {want} positional argument(s) but "
                              f"{mod.source(call.func)} passes {passed}"
                              + (" (the process index, then args)" if extra else ""),
                              f"make {target.id}'s parameters match args=(...)")
