"""What a rule is handed: the module group, its flows, its call graph and value facts, and `finding()`.

Rules (ddpdoctor/lint/rules/dlNNN_*.py) only ask questions of this object; every fact is computed
lazily once per linted file, so a rule that needs none of the expensive ones costs nothing.
"""
from __future__ import annotations

import ast
from functools import cached_property

from ddpdoctor.lint.facts import Group, Scope, rank_test
from ddpdoctor.lint.module import Module, target_key
from ddpdoctor.lint.registry import RULES, LintFinding

BIND_FIX = "torch.cuda.set_device(local_rank)  # local_rank = int(os.environ['LOCAL_RANK'])"


class Context:
    def __init__(self, group: Group):
        self.group = group

    @cached_property
    def walker(self):
        from ddpdoctor.lint.flow import Walker
        return Walker(self.group)

    @cached_property
    def flows(self):
        from ddpdoctor.lint.flow import Walker
        return Walker(self.group).run()

    @cached_property
    def values(self):
        from ddpdoctor.lint.values import Values
        return Values(self.group, self.walker)

    def finding(self, rid: str, mod: Module, node: ast.AST, message: str, fix: str = "", code: str = "",
                fix_kind: str | None = None) -> LintFinding:
        r = RULES[rid]
        line = getattr(node, "lineno", 1)
        if mod is not self.group.main:
            via = self.reached_from_main(mod, node)
            if via:
                message += f" (reached from {via})"
        return LintFinding(rid, r.severity, mod.display, line, getattr(node, "col_offset", 0) + 1, message, fix, code,
                           fix_kind or r.fix_kind, mod.where(line), str(mod.path))

    def reached_from_main(self, mod: Module, node: ast.AST, depth: int = 3) -> str:
        """For a finding in an imported module: the chain of calls from the linted file that runs it,
        `train.py:7 distributed.init()` (then the further calls, `-> utils/a.py:3 b()`); '' when no
        call in sight leads there."""
        main = self.group.main
        fn = mod.enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        path: list[str] = []
        while fn is not None and depth > 0:
            sites = self.values.call_sites(fn)
            if not sites:
                return ""
            m, call, _ = next(((m, c, o) for m, c, o in sites if m is main), sites[0])
            path.append(f"{m.display}:{call.lineno} {m.source(call.func, 40)}()")
            if m is main:
                return " -> ".join(reversed(path))
            fn = m.enclosing(call, (ast.FunctionDef, ast.AsyncFunctionDef))
            depth -= 1
        return ""

    def scope(self, mod: Module, node: ast.AST) -> Scope:
        return Scope(mod, mod.function_of(node) if not isinstance(node, ast.FunctionDef) else node)

    def calls(self, *names):
        return self.group.calls_to(*names)

    def rank_guard(self, mod: Module, test: ast.AST) -> ast.AST | None:
        """The rank expression an `if` test compares to a constant: by name (`rank == 0`, `is_main`),
        or any value the analysis knows is a rank (`if i == 0:` in an mp.spawn worker `def run(i, ...)`)."""
        r = rank_test(mod, test)
        if r is not None:
            return r
        key = target_key(test)
        if key is not None:  # save_logs = args.logs and is_master(args); ... if args.save_logs:
            vals = Scope(mod, mod.function_of(test)).assigned(key, getattr(test, "lineno", None))
            if not vals and "." in key:
                vals = [v for _, v, _ in self.values.attr_assigns.get(key, ())]
            for v in vals:
                for part in (v.values if isinstance(v, ast.BoolOp) else [v]):
                    if rank_test(mod, part) is not None:
                        return test
        if isinstance(test, ast.BoolOp):
            return next((x for v in test.values if (x := self.rank_guard(mod, v)) is not None), None)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            for a, b in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
                if isinstance(b, ast.Constant) and isinstance(b.value, int) and isinstance(a, (ast.Name, ast.Attribute)):
                    if self.values.rank_kind(mod, a, Scope(mod, mod.function_of(test))) in ("global", "local"):
                        return a
        return None


def chain_text(ev) -> str:
    """` (reached via main() -> build())` for an event found inside local calls."""
    return f" (reached via {' -> '.join(c + '()' for c in ev.chain)})" if len(ev.chain) > 1 else ""
