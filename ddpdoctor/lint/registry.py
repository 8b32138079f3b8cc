"""Lint rules: ids `DL` + 3 digits, a title, a severity, how their fix is applied, and their docs.

A rule is a function `rule(ctx) -> Iterable[LintFinding]` whose docstring holds the sections
`## What it checks`, `## Why it matters`, `## Fix` (the source of `ddpdoctor lint --rule DLnnn`
and of the generated pages in docs/reference/lint/). Ids are never reused.
Fix kinds follow ruff: `safe` (applied by --fix), `unsafe` (applied only with --unsafe-fixes:
the meaning may change in a corner case), `manual` (a code change a person makes).
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ddpdoctor.model import Severity

ID_RE = re.compile(r"^DL\d\d\d$")
DOC_SECTIONS = ("What it checks", "Why it matters", "Fix")
FIX_KINDS = ("safe", "unsafe", "manual")


@dataclass(frozen=True)
class LintFinding:
    rule: str
    severity: Severity
    path: str  # as shown (a notebook: "nb.ipynb:cell 2:line 3" comes from `where`)
    line: int
    col: int
    message: str
    fix: str = ""
    code: str = ""  # the replacement code, when the fix is one
    fix_kind: str = "manual"
    where: str = ""
    file: str = ""  # the real file path (for --fix)

    def to_dict(self) -> dict:
        return {"rule": self.rule, "severity": self.severity.label, "path": self.path, "line": self.line,
                "col": self.col, "location": self.where or f"{self.path}:{self.line}", "message": self.message,
                "fix": {"summary": self.fix, "code": self.code, "applicability": self.fix_kind}}


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: Severity
    fix_kind: str
    func: Callable[..., Iterable[LintFinding]] = field(compare=False)

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.func.__doc__ or "")

    def doc_section(self, name: str) -> str:
        from ddpdoctor.registry import doc_section
        return doc_section(self.doc, name)


RULES: dict[str, Rule] = {}


def rule(id: str, title: str, *, severity: Severity, fix: str = "manual"):
    if not ID_RE.match(id):
        raise ValueError(f"bad lint rule id {id!r}: want DL + 3 digits")
    if fix not in FIX_KINDS:
        raise ValueError(f"{id}: fix kind {fix!r} not in {FIX_KINDS}")

    def deco(func):
        if id in RULES and RULES[id].func.__qualname__ != func.__qualname__:
            raise ValueError(f"lint rule id {id} registered twice")
        RULES[id] = Rule(id, title, severity, fix, func)
        return func

    return deco


def all_rules() -> dict[str, Rule]:
    import ddpdoctor.lint.rules  # noqa: F401 - importing the package registers every rule module in it
    return RULES


def select(select=(), ignore=()) -> list[Rule]:
    sel = tuple(s.upper() for s in select)
    ign = tuple(s.upper() for s in ignore)
    return [r for i, r in sorted(all_rules().items())
            if (not sel or i.startswith(sel)) and not (ign and i.startswith(ign))]
