"""Read the catalog from its data files: one TOML file per failure mode under modes/, plus shared.toml
for the log-line patterns several modes share. See docs/writing-a-failure-mode.md.

Every file is validated as it loads: an unknown key, a missing field, a wrong type, a bad regex, an
example its pattern does not match, a signature name used twice or a `use` of an unknown shared
pattern raises CatalogError naming the file, so a bad file fails the test suite (tests/test_catalog.py)
and `ddpdoctor explain` says which file to fix.
"""
from __future__ import annotations

import re
from pathlib import Path

from ddpdoctor import tomlread
from ddpdoctor.catalog.model import CATEGORIES, FAILURE_ID_RE, Emitted, FailureMode, Signature, fix

HERE = Path(__file__).parent
MODES_DIR = HERE / "modes"
SHARED_FILE = HERE / "shared.toml"
NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")

_MODE_KEYS = {"id": str, "title": str, "category": str, "summary": str, "cause": str, "kind": str, "origin": str,
              "checks": list, "related": list, "sources": list, "confirm": str, "preflight": str, "fix": dict,
              "signatures": list, "ceiling": (int, float), "undecided": str}
_MODE_REQUIRED = ("id", "title", "category", "summary", "cause", "fix", "signatures")
_FIX_KEYS = {"summary": str, "commands": list, "env": dict, "code": str}
_SIG_KEYS = {"name": str, "pattern": str, "use": str, "weight": (int, float), "role": str, "example": str,
             "note": str, "trigger": (str, list), "emitted": list, "unemitted": str}
_EMITTED_KEYS = {"source": str, "file": str, "function": str, "versions": str, "template": str, "prefix": str,
                 "values": list}
_SHARED_KEYS = {"pattern": str, "example": str, "trigger": (str, list), "emitted": list}


class CatalogError(ValueError):
    """A catalog data file is malformed; the message starts with the file's path."""


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomlread.load(f)
    except tomlread.TOMLDecodeError as e:
        raise CatalogError(f"{path}: not valid TOML: {e}") from None


def _keys(where: str, table: dict, allowed: dict, required: tuple[str, ...] = ()) -> None:
    for k, v in table.items():
        if k not in allowed:
            raise CatalogError(f"{where}: unknown key {k!r} (allowed: {', '.join(sorted(allowed))})")
        if not isinstance(v, allowed[k]) or isinstance(v, bool):
            raise CatalogError(f"{where}: {k!r} has the wrong type ({type(v).__name__})")
    for k in required:
        if k not in table:
            raise CatalogError(f"{where}: missing {k!r}")


def load_shared(path: Path = SHARED_FILE) -> dict[str, dict]:
    data = _read(path)
    for name, table in data.items():
        if not NAME_RE.match(name) or not isinstance(table, dict):
            raise CatalogError(f"{path}: [{name}] must be an UPPER_SNAKE table")
        _keys(f"{path} [{name}]", table, _SHARED_KEYS, ("pattern",))
        table["emitted"] = _emitted(f"{path} [{name}]", table.get("emitted", ()))
    return data


def _emitted(where: str, entries) -> tuple[Emitted, ...]:
    out = []
    for j, e in enumerate(entries, 1):
        if isinstance(e, Emitted):  # a shared table already read
            out.append(e)
            continue
        if not isinstance(e, dict):
            raise CatalogError(f"{where}: emitted #{j} must be a table")
        _keys(f"{where} emitted #{j}", e, _EMITTED_KEYS, ("source", "file", "versions", "template"))
        out.append(Emitted(e["source"], e["file"], e["versions"], e["template"], e.get("function", ""),
                           e.get("prefix", ""), tuple(str(v) for v in e.get("values", ()))))
    return tuple(out)


def _signature(where: str, t: dict, shared: dict[str, dict]) -> Signature:
    _keys(where, t, _SIG_KEYS, ("name", "weight"))
    if not NAME_RE.match(t["name"]):
        raise CatalogError(f"{where}: name {t['name']!r} is not UPPER_SNAKE")
    if ("use" in t) == ("pattern" in t):
        raise CatalogError(f"{where}: give exactly one of 'pattern' or 'use'")
    base = {}
    if "use" in t:
        if t["use"] not in shared:
            raise CatalogError(f"{where}: use = {t['use']!r} is not in {SHARED_FILE.name}")
        base = shared[t["use"]]
    pattern = t.get("pattern", base.get("pattern", ""))
    try:
        re.compile(pattern)
    except re.error as e:
        raise CatalogError(f"{where}: bad pattern {pattern!r}: {e}") from None
    trigger = t.get("trigger", base.get("trigger", ""))
    # a `use` of a shared pattern carries the shared table's provenance unless the signature lists its own
    emitted = _emitted(where, t.get("emitted", ())) or base.get("emitted", ())
    if emitted and t.get("unemitted"):
        raise CatalogError(f"{where}: give 'emitted' or 'unemitted' (why no code template is recorded), not both")
    try:
        sig = Signature(pattern, float(t["weight"]), t.get("role", "cause"), t.get("example", base.get("example", "")),
                        t.get("note", ""), tuple(trigger) if isinstance(trigger, list) else trigger, name=t["name"],
                        emitted=tuple(emitted), shared="use" in t, unemitted=t.get("unemitted", ""))
    except ValueError as e:
        raise CatalogError(f"{where}: {e}") from None
    if sig.example and not sig.regex.search(sig.example):
        raise CatalogError(f"{where}: pattern does not match its example {sig.example!r}")
    return sig


def load_mode(path: Path, shared: dict[str, dict]) -> FailureMode:
    data = _read(path)
    _keys(str(path), data, _MODE_KEYS, _MODE_REQUIRED)
    if path.stem != data["id"]:
        raise CatalogError(f"{path}: id {data['id']!r} differs from the file name")
    if not FAILURE_ID_RE.match(data["id"]):
        raise CatalogError(f"{path}: id {data['id']!r} is not UPPER_SNAKE")
    if data["category"] not in CATEGORIES:
        raise CatalogError(f"{path}: category {data['category']!r} not in {CATEGORIES}")
    _keys(f"{path} [fix]", data["fix"], _FIX_KEYS, ("summary",))
    sigs, names = [], set()
    for i, t in enumerate(data["signatures"], 1):
        if not isinstance(t, dict):
            raise CatalogError(f"{path}: signatures must be [[signatures]] tables")
        sig = _signature(f"{path} signature #{i}", t, shared)
        if sig.name in names:
            raise CatalogError(f"{path}: signature name {sig.name} used twice")
        names.add(sig.name)
        sigs.append(sig)
    f = data["fix"]
    try:
        return FailureMode(
            id=data["id"], title=data["title"], category=data["category"], summary=data["summary"],
            cause=data["cause"], fix=fix(f["summary"], *f.get("commands", ()), env=f.get("env"), code=f.get("code", "")),
            signatures=tuple(sigs), checks=tuple(data.get("checks", ())), confirm=data.get("confirm", ""),
            preflight=data.get("preflight", ""), kind=data.get("kind", "root"), related=tuple(data.get("related", ())),
            sources=tuple(data.get("sources", ())), origin=data.get("origin", "reference"),
            ceiling=float(data.get("ceiling", 1.0)), undecided=data.get("undecided", ""))
    except ValueError as e:
        raise CatalogError(f"{path}: {e}") from None


def load_catalog(modes_dir: Path = MODES_DIR, shared_file: Path = SHARED_FILE) -> dict[str, FailureMode]:
    """Every failure mode by id, ordered by category (CATEGORIES order) then id."""
    shared = load_shared(shared_file)
    modes = [load_mode(p, shared) for p in sorted(modes_dir.glob("*.toml"))]
    modes.sort(key=lambda fm: (CATEGORIES.index(fm.category), fm.id))
    out: dict[str, FailureMode] = {fm.id: fm for fm in modes}
    for fm in modes:
        for rel in fm.related:
            if rel not in out:
                raise CatalogError(f"{modes_dir / (fm.id + '.toml')}: related {rel!r} is no failure mode")
    return out
