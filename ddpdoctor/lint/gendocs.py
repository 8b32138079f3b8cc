"""Generate docs/reference/lint/ (one page per lint rule + an index) from the rules' docstrings.

    python -m ddpdoctor.lint.gendocs            write the pages
    python -m ddpdoctor.lint.gendocs --check    exit 1 when a page is missing, stale or orphaned
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddpdoctor.lint.registry import DOC_SECTIONS, Rule, all_rules

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "docs" / "reference" / "lint"
FIX_TEXT = {"safe": "safe: `ddpdoctor lint --fix` applies it",
            "unsafe": "unsafe: applied only with `--fix --unsafe-fixes` (meaning may change in a corner case)",
            "manual": "manual: a code change the message describes"}


def rule_page(r: Rule) -> str:
    out = [f"# {r.id}: {r.title}", "", f"Severity: **{r.severity.label}** · Fix: {FIX_TEXT[r.fix_kind]}", ""]
    for s in DOC_SECTIONS:
        out += [f"## {s}", "", r.doc_section(s), ""]
    out += examples(r.id)
    out += [f"Silence one line with `# noqa: {r.id}`; skip the rule with `--ignore {r.id}`.", ""]
    return "\n".join(out)


FIXTURES = Path(__file__).resolve().parent / "rules" / "fixtures"


def examples(rid: str) -> list[str]:
    """The rule's fixtures, as the page's examples: `bad*` (marked lines are reported), `ok*`."""
    d = FIXTURES / rid
    if not d.is_dir():
        return []
    out = ["## Examples", "", "From the rule's fixtures (ddpdoctor/lint/rules/fixtures/"
           f"{rid}/; the test suite checks them): lines marked `# expect: {rid}` are reported.", ""]
    for p in sorted(d.iterdir(), key=lambda p: (not p.name.startswith("bad"), p.name)):
        files = [p] if p.suffix == ".py" else sorted(p.rglob("*.py")) if p.is_dir() else []
        for f in files:
            text = f.read_text().strip()
            if not text:
                continue
            label = "reported" if p.name.startswith("bad") else "fine"
            out += [f"`{f.relative_to(d)}` ({label}):", "", "```python", text, "```", ""]
    return out


def index_page(rules) -> str:
    out = ["# Lint rules", "", "Generated from the rules' docstrings by `python -m ddpdoctor.lint.gendocs`; "
           "see [docs/lint.md](../../lint.md).", "", "| id | severity | fix | rule |", "|---|---|---|---|"]
    for r in rules.values():
        out.append(f"| [{r.id}]({r.id}.md) | {r.severity.label} | {r.fix_kind} | {r.title} |")
    return "\n".join(out) + "\n"


def expected() -> dict[str, str]:
    rules = all_rules()
    pages = {f"{i}.md": rule_page(r) for i, r in sorted(rules.items())}
    pages["README.md"] = index_page(dict(sorted(rules.items())))
    return pages


def diff(folder: Path):
    want = expected()
    have = {p.name for p in folder.glob("*.md")} if folder.is_dir() else set()
    missing = sorted(set(want) - have)
    stale = sorted(n for n in set(want) & have if (folder / n).read_text() != want[n])
    orphaned = sorted(have - set(want))
    return missing, stale, orphaned


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpdoctor.lint.gendocs")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    a = ap.parse_args(argv)
    if a.check:
        missing, stale, orphaned = diff(a.dir)
        for name, lst in (("missing", missing), ("stale", stale), ("orphaned", orphaned)):
            if lst:
                print(f"{name}: {', '.join(lst)}")
        return 1 if (missing or stale or orphaned) else 0
    a.dir.mkdir(parents=True, exist_ok=True)
    want = expected()
    for n, text in want.items():
        p = a.dir / n
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
    for p in a.dir.glob("*.md"):
        if p.name not in want:
            p.unlink()
    print(f"{a.dir}: {len(want)} page(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
