"""Reading what the user named: files, directories, notebooks; every bad input becomes one line.

Nothing here raises on bad input: a path that cannot be linted yields an `InputProblem` (file and
reason, with the line for syntax errors) and the others are still linted.
"""
from __future__ import annotations

import ast
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from ddpdoctor.lint.module import Module
from ddpdoctor.readfile import read_limited

MAX_BYTES = 5 * 1024 * 1024  # a training script is kilobytes; a 5 MiB ".py" is generated or data
SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "env", "node_modules", "site-packages", ".tox", ".mypy_cache",
             "build", "dist", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class InputProblem:
    path: str
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"


def expand(paths) -> tuple[list[Path], list[InputProblem]]:
    """Files to lint, in a stable order: named files as given, directories walked for .py/.ipynb."""
    files, problems = [], []
    for raw in paths:
        p = Path(raw)
        try:
            if p.is_dir():
                found = []
                for root, dirs, names in os.walk(p, onerror=lambda e: problems.append(
                        InputProblem(str(e.filename or raw), f"cannot read directory: {e.strerror}"))):
                    dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                    found += [Path(root) / n for n in sorted(names) if n.endswith((".py", ".ipynb"))]
                files += found
            elif p.exists():
                files.append(p)
            else:
                problems.append(InputProblem(str(raw), "no such file or directory"))
        except OSError as e:
            problems.append(InputProblem(str(raw), f"cannot read: {e.strerror or e}"))
    return files, problems


_PY2_HINTS = (re.compile(r"^\s*print\s+[\"'\w]", re.M), re.compile(r"^\s*exec\s+[\"']", re.M),
              re.compile(r"except\s+\w+\s*,\s*\w+\s*:"), re.compile(r"\bur[\"']"))


def load(path: Path) -> Module | InputProblem:
    """Parse one file (a notebook: its code cells) into a Module, or say in one line why not."""
    try:
        st = path.stat()
        if not path.is_file():
            return InputProblem(str(path), "not a regular file")
        if st.st_size > MAX_BYTES:
            return InputProblem(str(path), f"skipped: {st.st_size / 2**20:.1f} MiB is too large for a script "
                                           f"(limit {MAX_BYTES // 2**20} MiB)")
        data = read_limited(path, MAX_BYTES)  # a link to /proc/kmsg or a FIFO: refused, never waited on
    except OSError as e:
        return InputProblem(str(path), f"cannot read: {e.strerror or e}")
    if b"\0" in data[:8192]:
        return InputProblem(str(path), "skipped: binary file, not Python source")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    line_map = None
    if path.suffix == ".ipynb":
        got = _notebook_code(path, text)
        if isinstance(got, InputProblem):
            return got
        text, line_map = got
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning on odd escapes in user code is not ours to show
            tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        line = e.lineno or None
        if line_map and line in line_map:
            return InputProblem(f"{path}:{line_map[line]}", f"syntax error: {e.msg}")
        if any(h.search(text) for h in _PY2_HINTS):
            return InputProblem(str(path), f"Python 2 source ({e.msg}); lint reads Python 3", line)
        return InputProblem(str(path), f"syntax error: {e.msg}", line)
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return InputProblem(str(path), f"cannot parse: {type(e).__name__}")
    return Module.parse(path, text, tree, str(path), line_map)


def _notebook_code(path: Path, text: str):
    """Code cells joined into one source; IPython magics and shell lines become `pass`."""
    try:
        nb = json.loads(text)
        cells = nb["cells"] if isinstance(nb, dict) else None
        if not isinstance(cells, list):
            raise ValueError
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: [[[[... nested past the stack
        return InputProblem(str(path), "not a Jupyter notebook (no JSON with 'cells')")
    out, line_map = [], {}
    n = 0
    for ci, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        for li, line in enumerate(src.splitlines(), 1):
            s = line.lstrip()
            if s.startswith(("%", "!")) or s.startswith("?"):
                line = line[: len(line) - len(s)] + "pass"
            out.append(line)
            n += 1
            line_map[n] = f"cell {ci}:line {li}"
        out.append("")
        n += 1
    return "\n".join(out) + "\n", line_map


def _import_roots(mod: Module, name: str, level: int) -> list[Path]:
    """Where an import can live: relative imports from the file's package; absolute ones from the
    script's folder, then each folder above it (a package beside `scripts/`, or the script's own
    package imported as `from mypkg.utils import x`), three levels up at most."""
    base = mod.path.parent
    if level:
        for _ in range(level - 1):
            base = base.parent
        return [base]
    top = name.split(".")[0] if name else ""
    roots, d = [], base
    for _ in range(4):
        if top and ((d / f"{top}.py").is_file() or (d / top).is_dir()):
            roots.append(d)
            break
        d = d.parent
    return roots or [base]


def follow_imports(mod: Module, cache: dict) -> list[Module]:
    """The local modules `mod` imports (one level): `import trainer`, `from utils.ddp import setup`,
    `from guided_diffusion import dist_util` (the package and each submodule named)."""
    out = []
    me = mod.path.resolve()

    def add(c: Path):
        key = c.resolve()
        if key == me:
            return
        if key not in cache:
            got = load(c)
            cache[key] = got if isinstance(got, Module) else None
        if cache[key] is not None and cache[key] not in out:
            out.append(cache[key])

    for name, names, level in mod.local_imports:
        parts = name.split(".") if name else []
        for root in _import_roots(mod, name, level):
            if parts:
                for c in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
                    if c.is_file():
                        add(c)
                        break
            for n in names:  # from . import trainer / from pkg import module
                c = root.joinpath(*parts, f"{n}.py")
                if c.is_file():
                    add(c)
    return out
