"""The check registry: `@check` registers a judgement function under a stable id.

Ids are `DD` + 3 digits; the first digit is the category (1 reachability, 2 DNS, 3 NIC, 4 GPU,
5 torch.distributed, 6 system/limits, 7 Slurm, 8 environment variables, 9 ddpdoctor itself).
An id is never reused. Every check's docstring is its documentation: `## What it checks`,
`## Why it matters`, `## Fix` (a test fails when one is missing).
"""
from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ddpdoctor.model import CATEGORIES, Finding

ID_RE = re.compile(r"^DD[1-9]\d\d$")
CATEGORY_DIGIT = {
    "1": "reachability", "2": "dns", "3": "nic", "4": "gpu", "5": "distributed",
    "6": "system", "7": "slurm", "8": "env", "9": "ddpdoctor",
}
DOC_SECTIONS = ("What it checks", "Why it matters", "Fix")

# Modules that hold checks; imported on first use of the registry so `--help` stays cheap.
CHECK_MODULES = (
    "ddpdoctor.checks.reachability",
    "ddpdoctor.checks.dns",
    "ddpdoctor.checks.nic",
    "ddpdoctor.checks.env",
    "ddpdoctor.checks.system",
    "ddpdoctor.checks.gpu",
    "ddpdoctor.checks.distributed",
    "ddpdoctor.checks.slurm",
    "ddpdoctor.checks.cluster",
    "ddpdoctor.checks.launch",
    "ddpdoctor.checks.inspect",
)


class Skip(Exception):
    """Raised by a check that does not apply here; the message says why."""


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    category: str
    func: Callable[..., Iterable[Finding] | None]
    tags: frozenset[str] = field(default_factory=frozenset)
    timeout: float = 5.0
    order: int = 0  # slow checks last in the output, like brew doctor

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.func.__doc__ or "")

    def doc_section(self, name: str) -> str:
        return doc_section(self.doc, name)


def doc_section(doc: str, name: str) -> str:
    """The text under `## name` in a check's or a lint rule's docstring ('' when absent)."""
    m = re.search(rf"^## {re.escape(name)}\s*\n(.*?)(?=^## |\Z)", doc, re.S | re.M)
    return m.group(1).strip() if m else ""


REGISTRY: dict[str, Check] = {}


# The commands that run checks: a check's tags must name one of them, so a misspelled tag fails at
# registration instead of silently dropping the check from every command. tests/test_registry.py
# keeps the used ones in step with cli/__init__.py LAZY_COMMANDS. New command: add its name here.
COMMAND_TAGS = frozenset({"network", "smoke", "prolog", "cluster", "inspect", "run", "lint"})


def check(id: str, title: str, *, category: str, tags: Iterable[str] = (), timeout: float = 5.0, order: int = 0):
    """Register a check. `tags` name the commands (and modes) that run it, e.g. {"network", "prolog"}; see COMMAND_TAGS."""
    if not ID_RE.match(id):
        raise ValueError(f"bad check id {id!r}: want DD + 3 digits")
    if CATEGORY_DIGIT[id[2]] != category or category not in CATEGORIES:
        raise ValueError(f"{id}: category {category!r} does not match its first digit ({CATEGORY_DIGIT[id[2]]})")
    unknown = set(tags) - COMMAND_TAGS
    if unknown:
        raise ValueError(f"{id}: tags {sorted(unknown)} name no command (known: {sorted(COMMAND_TAGS)})")

    def deco(func):
        if id in REGISTRY and REGISTRY[id].func.__qualname__ != func.__qualname__:
            raise ValueError(f"check id {id} registered twice")
        REGISTRY[id] = Check(id, title, category, func, frozenset(tags), timeout, order)
        return func

    return deco


_loaded = False


def load_all() -> dict[str, Check]:
    global _loaded
    if not _loaded:
        for mod in CHECK_MODULES:
            try:
                importlib.import_module(mod)
            except ModuleNotFoundError as e:
                if e.name != mod:  # a real missing dependency inside a module is a bug: surface it
                    raise
        _loaded = True
    return REGISTRY


def select(tag: str | None = None, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[Check]:
    """Checks carrying `tag`, filtered by id prefixes (`--select DD2 --ignore DD206`), in id order."""
    checks = load_all().values()
    sel = tuple(s.upper() for s in select)
    ign = tuple(s.upper() for s in ignore)
    out = [
        c for c in checks
        if (tag is None or tag in c.tags)
        and (not sel or c.id.startswith(sel))
        and not (ign and c.id.startswith(ign))
    ]
    return sorted(out, key=lambda c: (c.order, c.id))


def get(check_id: str) -> Check | None:
    return load_all().get(check_id.upper())
