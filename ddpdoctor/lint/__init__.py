"""`ddpdoctor lint`: static checks of distributed training scripts (rules DL001...).

Python's `ast` reads the script (never importing it, nor torch); each file is linted together with
the local modules it imports (one level), so a helper in `utils.py` that calls `.cuda()` counts.
`fix.py` writes safe fixes back with LibCST so formatting and comments survive.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from ddpdoctor.lint.registry import LintFinding, all_rules, select as select_rules
from ddpdoctor.lint.source import InputProblem, expand, follow_imports, load


class ModuleCache(OrderedDict):
    """Parsed modules by resolved path, the most recently used kept: a module is parsed once while it
    is in use (linted, then imported by its neighbours), and memory stays bounded on a huge tree
    (a parsed 300-line file holds about half a MiB of AST)."""

    def __init__(self, size: int = 16):
        super().__init__()
        self.size = size

    def __getitem__(self, key):
        self.move_to_end(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass
class LintResult:
    findings: list[LintFinding] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    files: int = 0
    crashes: list[str] = field(default_factory=list)  # a rule that raised: a ddpdoctor bug, reported
    duration_s: float = 0.0


def lint_paths(paths, select=(), ignore=()) -> LintResult:
    from ddpdoctor.lint.context import Context
    from ddpdoctor.lint.facts import Group

    t0 = time.monotonic()
    rules = select_rules(select, ignore)  # imports ddpdoctor.lint.rules: one module per rule
    res = LintResult()
    files, res.problems = expand(paths)
    cache = ModuleCache()
    seen = set()
    for path in files:
        try:
            key = path.resolve()
        except OSError:
            key = None
        # a file that another file's import already parsed is not parsed again (a project's modules
        # are both linted and followed)
        mod = cache.get(key) if key is not None and cache.get(key) is not None else load(path)
        if key is not None and not isinstance(mod, InputProblem):
            cache[key] = mod
        if isinstance(mod, InputProblem):
            res.problems.append(mod)
            continue
        res.files += 1
        group = Group([mod] + follow_imports(mod, cache))
        ctx = Context(group)
        by_path = {m.display: m for m in group.modules}
        for r in rules:
            try:
                found = list(r.func(ctx))
            except RecursionError:  # the input's fault, not a bug: bad input (exit 2), not a crash (exit 3)
                res.problems.append(InputProblem(str(path), f"{r.id} gave up: the code nests too deep"))
                continue
            except Exception as e:  # noqa: BLE001 - one rule's bug must not stop the others
                res.crashes.append(f"{path}: {r.id} crashed (ddpdoctor bug, please report): {type(e).__name__}: {e}")
                continue
            for f in found:
                m = by_path.get(f.path)
                if m is not None and m.noqa(f.line, f.rule):
                    continue
                key = (f.file, f.line, f.rule)
                if key in seen:
                    continue
                seen.add(key)
                res.findings.append(f)
    res.findings.sort(key=lambda f: (f.path, f.line, f.rule))
    res.duration_s = time.monotonic() - t0
    return res


__all__ = ["LintResult", "lint_paths", "all_rules"]
