"""DL007: processes started when the module is imported."""
from __future__ import annotations

import ast

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.facts import spawn_calls
from ddpdoctor.lint.flow import module_level_unguarded
from ddpdoctor.lint.module import Module
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


def _runs_on_import(mod: Module, node: ast.AST, depth: int = 0) -> bool:
    if module_level_unguarded(mod, node):
        return True
    fn = mod.function_of(node)
    if fn is None or depth > 2 or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    callers = [c for c in mod.calls if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    return any(_runs_on_import(mod, c, depth + 1) for c in callers)


@rule("DL007", "Processes started without a __main__ guard", severity=Severity.ERROR)
def spawn_without_main_guard(ctx: Context):
    """## What it checks
    `mp.spawn(...)`, `start_processes(...)` or `Process(...)` that runs when the module is imported:
    at module level (or in a function called at module level) outside `if __name__ == "__main__":`.

    ## Why it matters
    `mp.spawn` uses the *spawn* start method: each child re-imports the main module. Without the
    guard the child starts processes again while importing: "RuntimeError: An attempt has been
    made to start a new process before the current process has finished its bootstrapping phase".

    ## Fix
    Move the start under `if __name__ == "__main__":` (and keep the module's top level free of work).
    """
    for mod, call, q, *_ in spawn_calls(ctx.group):
        if mod is ctx.group.main and _runs_on_import(mod, call):
            yield ctx.finding("DL007", mod, call,
                              f"{mod.source(call.func)}(...) runs on import: each spawned child re-imports this "
                              "file and starts processes again",
                              'put it under if __name__ == "__main__":')
