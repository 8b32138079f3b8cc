"""`python -m ddpdoctor.dev generate-all [--check]`: every generated page and table, in one pass.

Generated here:
- docs/reference/checks/: a page per check and per failure mode, and the index (ddpdoctor/catalog/pages.py);
- docs/reference/lint/: a page per lint rule, and the index (ddpdoctor/lint/gendocs.py);
- the tables between marker comments in the hand-written docs (docs/*.md, README.md):

      <!-- generated: checks network -->     the checks a command runs (its tag): id, what, finding ids
      <!-- generated: lint rules -->         every lint rule: id, severity, fix, what
      ...
      <!-- end generated -->

  Everything between the two comments is replaced; the prose around them stays by hand.

`--check` writes nothing and exits 1 listing each stale, missing or orphaned file
(tests/test_dev_generate.py runs it, so a new check, mode or rule cannot leave a page or table behind).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
BLOCK_RE = re.compile(r"(<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


class GenerateError(ValueError):
    """A marker names a table that does not exist (one line, with the file)."""


def _checks_table(tag: str, link_prefix: str) -> str:
    from ddpdoctor import commands, registry
    from ddpdoctor.finding_kinds import kinds_of
    if tag not in commands.check_tags():
        raise GenerateError(f"no command {tag!r} runs checks (known: {', '.join(sorted(commands.check_tags()))})")
    out = ["| id | verifies | finding ids |", "|---|---|---|"]
    for c in sorted((c for c in registry.load_all().values() if tag in c.tags), key=lambda c: c.id):
        k = kinds_of(c.func)
        ids = ", ".join(f"`{x}`" for x in k.literal) + (", computed" if k.computed else "")
        out.append(f"| [{c.id}]({link_prefix}reference/checks/{c.id}.md) | {_cell(c.title)} | {ids or '-'} |")
    return "\n".join(out) + "\n"


def _lint_table(link_prefix: str) -> str:
    from ddpdoctor.lint.registry import all_rules
    out = ["| id | severity | fix | what |", "|---|---|---|---|"]
    for rid, r in sorted(all_rules().items()):
        out.append(f"| [{rid}]({link_prefix}reference/lint/{rid}.md) | {r.severity.label} | {r.fix_kind} | {_cell(r.title)} |")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def block(spec: str, doc: Path) -> str:
    """The generated text of one marker block in `doc` (links relative to docs/)."""
    prefix = "" if doc.parent.name == "docs" else "docs/"
    words = spec.split()
    if len(words) == 2 and words[0] == "checks":
        return _checks_table(words[1], prefix)
    if words == ["lint", "rules"]:
        return _lint_table(prefix)
    raise GenerateError(f"{doc}: unknown generated block {spec!r} (want 'checks COMMAND' or 'lint rules')")


def fill_blocks(text: str, doc: Path) -> str:
    return BLOCK_RE.sub(lambda m: m.group(1) + block(m.group("spec").strip(), doc) + m.group(4), text)


def _marked_docs(root: Path) -> list[Path]:
    docs = [p for p in sorted((root / "docs").glob("*.md"))] + [root / "README.md"]
    return [p for p in docs if p.is_file() and "<!-- generated:" in p.read_text(encoding="utf-8")]


def _folders(root: Path) -> list[tuple[Path, Callable[[], dict[str, str]]]]:
    """Folders that hold only generated pages: (folder, name -> text)."""
    from ddpdoctor.catalog.pages import expected_pages
    from ddpdoctor.lint import gendocs as lint_gendocs
    return [(root / "docs" / "reference" / "checks", expected_pages),
            (root / "docs" / "reference" / "lint", lint_gendocs.expected)]


def plan(root: Path = ROOT) -> tuple[dict[Path, str], list[Path]]:
    """(path -> the text it should have, orphaned pages to remove)."""
    want: dict[Path, str] = {}
    orphans: list[Path] = []
    for folder, expected in _folders(root):
        pages = expected()
        want.update({folder / n: t for n, t in pages.items()})
        if folder.is_dir():
            orphans += [p for p in sorted(folder.glob("*.md")) if p.name not in pages]
    for doc in _marked_docs(root):
        want[doc] = fill_blocks(doc.read_text(encoding="utf-8"), doc)
    return want, orphans


def stale(root: Path = ROOT) -> list[str]:
    """One line per file that generate-all would change: 'missing: PATH', 'stale: PATH', 'orphaned: PATH'."""
    want, orphans = plan(root)
    out = []
    for path, text in sorted(want.items()):
        if not path.exists():
            out.append(f"missing: {path.relative_to(root)}")
        elif path.read_text(encoding="utf-8") != text:
            out.append(f"stale: {path.relative_to(root)}")
    out += [f"orphaned: {p.relative_to(root)}" for p in orphans]
    return out


def write(root: Path = ROOT) -> list[str]:
    """Bring every generated file up to date; the files written or removed."""
    want, orphans = plan(root)
    changed = []
    for path, text in sorted(want.items()):
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(str(path.relative_to(root)))
    for p in orphans:
        p.unlink()
        changed.append(f"{p.relative_to(root)} (removed)")
    return changed
