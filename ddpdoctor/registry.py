"""The check registry: `@check` registers a judgement function under a stable id.

Ids are `DD` + 3 digits; the first digit is the category (1 reachability, 2 DNS, 3 NIC, 4 GPU,
5 torch.distributed, 6 system/limits, 7 Slurm, 8 environment variables, 9 ddpdoctor itself).
An id is never reused. Every check's docstring is its documentation: `## What it checks`,
`## Why it matters`, `## Fix` (a test fails when one is missing).
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ddpdoctor import commands
from ddpdoctor.model import CATEGORIES, Finding

ID_RE = re.compile(r"^DD[1-9]\d\d$")
CATEGORY_DIGIT = {
    "1": "reachability", "2": "dns", "3": "nic", "4": "gpu", "5": "distributed",
    "6": "system", "7": "slurm", "8": "env", "9": "ddpdoctor",
}
DOC_SECTIONS = ("What it checks", "Why it matters", "Fix")

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
    context: type | None = None  # the context type it reads (its commands hand it this or a subclass)

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


# A check's tags name the commands that run it (ddpdoctor/commands.py: those with a context type), so
# a misspelled tag fails at registration instead of silently dropping the check from every command.
COMMAND_TAGS = commands.check_tags()


def _context_of(tags: frozenset[str], context: type | None, id: str) -> type | None:
    """The context type the check reads; ValueError when a tag's command hands it another type.

    Without `context=`, the check reads what its commands hand it: their context types must then be
    one type and its subclasses (prolog's PrologFacts is a NetworkFacts), the most general one wins."""
    given = {t: commands.get(t).load_context_type() for t in sorted(tags)}
    if context is None:
        bases = [c for c in given.values() if all(issubclass(o, c) for o in given.values())]
        if given and not bases:
            raise ValueError(f"{id}: tags {sorted(tags)} hand it unrelated contexts "
                             f"({', '.join(f'{t}: {c.__name__}' for t, c in given.items())}); "
                             "say which one it reads with context=")
        return bases[0] if bases else None
    wrong = {t: c for t, c in given.items() if not issubclass(c, context)}
    if wrong:
        raise ValueError(f"{id}: reads a {context.__name__}, but "
                         + ", ".join(f"{t} hands its checks a {c.__name__}" for t, c in wrong.items()))
    return context


def check(id: str, title: str, *, category: str, tags: Iterable[str] = (), timeout: float = 5.0, order: int = 0,
          context: type | None = None):
    """Register a check. `tags` name the commands (and modes) that run it, e.g. {"network", "prolog"}
    (ddpdoctor/commands.py); `context` the type it reads, when its commands hand it different ones."""
    if not ID_RE.match(id):
        raise ValueError(f"bad check id {id!r}: want DD + 3 digits")
    if CATEGORY_DIGIT[id[2]] != category or category not in CATEGORIES:
        raise ValueError(f"{id}: category {category!r} does not match its first digit ({CATEGORY_DIGIT[id[2]]})")
    unknown = set(tags) - COMMAND_TAGS
    if unknown:
        raise ValueError(f"{id}: tags {sorted(unknown)} name no command that runs checks (known: {sorted(COMMAND_TAGS)})")
    ctx_type = _context_of(frozenset(tags), context, id)

    def deco(func):
        if id in REGISTRY and REGISTRY[id].func.__qualname__ != func.__qualname__:
            raise ValueError(f"check id {id} registered twice")
        REGISTRY[id] = Check(id, title, category, func, frozenset(tags), timeout, order, ctx_type)
        return func

    return deco


def check_modules() -> list[str]:
    """Every module of ddpdoctor/checks/: found on disk, so a new one registers without a list to edit."""
    import ddpdoctor.checks as pkg
    return sorted(f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


_loaded = False


def load_all() -> dict[str, Check]:
    global _loaded
    if not _loaded:
        for mod in check_modules():
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
