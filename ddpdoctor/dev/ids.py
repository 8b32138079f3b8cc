"""Is an id free? Ids are never reused (a site silences `DD102.refused` by name; an old report or log
still names a retired failure mode), so an id is taken when anything in the tree or its git history names
it, not only when it is registered now."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Mapping

# Where a used id leaves a trace: the package's code and data (a mode's `checks = [...]`, a siteconfig
# example), now or in its git history. Not docs/ or tests/: a guide names a free id as its example, and
# ddpdoctor/dev/ (these scaffolds) names example ids in its help.
_SEARCHED = ("*.py", "*.toml")
_EXCLUDED = "ddpdoctor/dev"


class Refused(ValueError):
    """Bad input to a scaffold: one line for the user, exit 2."""


def _mentions(ident: str, root: Path) -> Path | None:
    word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(ident)}(?![A-Za-z0-9_])")
    for pattern in _SEARCHED:
        for p in sorted((root / "ddpdoctor").rglob(pattern)):
            if p.relative_to(root).as_posix().startswith(_EXCLUDED + "/"):
                continue
            try:
                if word.search(p.read_text(encoding="utf-8", errors="replace")):
                    return p
            except OSError:
                continue
    return None


def _in_history(ident: str, root: Path) -> str:
    """A commit that added or removed `ident`, or ''. Bounded: no git, no repository or a slow git says ''."""
    git = shutil.which("git")
    if not git or not (root / ".git").exists():
        return ""
    try:
        p = subprocess.run([git, "-C", str(root), "log", "--all", "-1", "--format=%h %s", f"-S{ident}", "--",
                            "ddpdoctor", f":(exclude){_EXCLUDED}"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout.strip() if p.returncode == 0 else ""


def id_in_use(ident: str, root: Path, *, registered: Mapping[str, object] = ()) -> str:
    """'' when `ident` is free, else one line saying where it is used."""
    if ident in registered:
        return f"{ident} is already used (registered); ids are never reused: pick another"
    where = _mentions(ident, root)
    if where is not None:
        return f"{ident} is already used ({where.relative_to(root)} names it); ids are never reused: pick another"
    commit = _in_history(ident, root)
    if commit:
        return f"{ident} was used before (commit {commit[:60]}); ids are never reused: pick another"
    return ""


def next_free_check_id(digit: str, root: Path, registered: Mapping[str, object]) -> str:
    """The lowest DD<digit>nn no code names now or named before (for a refusal's hint), or ''."""
    for n in range(1, 100):
        cand = f"DD{digit}{n:02d}"
        if not id_in_use(cand, root, registered=registered):
            return cand
    return ""
