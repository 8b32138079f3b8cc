"""Write the browsable catalog under docs/reference/checks/: one page per failure mode and per check, plus README.md.

    python -m ddpdoctor.catalog.gendocs            # write (remove pages of ids that no longer exist)
    python -m ddpdoctor.catalog.gendocs --check    # exit 1 and list what is stale or missing

tests/test_catalog_docs.py fails when docs/reference/checks/ is out of date, so a new check or failure mode comes
with its page.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddpdoctor.catalog.pages import expected_pages

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "docs" / "reference" / "checks"


def diff(directory: Path) -> tuple[list[str], list[str], list[str]]:
    """(missing, stale, orphaned) page names in `directory`."""
    want = expected_pages()
    have = {p.name for p in directory.glob("*.md")} if directory.is_dir() else set()
    missing = sorted(n for n in want if n not in have)
    stale = sorted(n for n in want if n in have and (directory / n).read_text(encoding="utf-8") != want[n])
    orphaned = sorted(n for n in have if n not in want)
    return missing, stale, orphaned


def write(directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    want = expected_pages()
    changed = 0
    for name, text in want.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed += 1
    for path in directory.glob("*.md"):
        if path.name not in want:
            path.unlink()
            changed += 1
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpdoctor.catalog.gendocs", description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="output folder (default: docs/reference/checks/ of the repo)")
    ap.add_argument("--check", action="store_true", help="only report stale, missing or orphaned pages")
    a = ap.parse_args(argv)
    if a.check:
        missing, stale, orphaned = diff(a.dir)
        for label, names in (("missing", missing), ("stale", stale), ("orphaned", orphaned)):
            for n in names:
                print(f"{label}: {a.dir / n}")
        if missing or stale or orphaned:
            print("run: python -m ddpdoctor.catalog.gendocs", file=sys.stderr)
            return 1
        return 0
    n = write(a.dir)
    print(f"{a.dir}: {n} page(s) written or removed, {len(expected_pages())} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
