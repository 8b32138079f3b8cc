"""Golden files: a report's whole JSON and its text, compared byte for byte with tests/golden/<name>.

Durations are the one thing that differs between runs: each check's own duration is set to 0 and
the report's to 1 s before anything is compared. `DDPDOCTOR_UPDATE_GOLDEN=1 pytest ...` writes the
files instead (then read the diff before committing: a golden that changed is an output that changed).
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from ddpdoctor.model import Report
from ddpdoctor.render import json as render_json
from ddpdoctor.render import text as render_text

DIR = Path(__file__).parent / "golden"


def steady(report: Report) -> Report:
    results = tuple(dataclasses.replace(r, duration_s=0.0) for r in report.results)
    return dataclasses.replace(report, results=results, duration_s=1.0)


def check(name: str, report: Report) -> None:
    report = steady(report)
    got = {f"{name}.json": render_json.render(report), f"{name}.txt": render_text.render(report, verbose=True)}
    for fname, text in got.items():
        path = DIR / fname
        if os.environ.get("DDPDOCTOR_UPDATE_GOLDEN") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            continue
        assert path.exists(), f"no golden {path}: run with DDPDOCTOR_UPDATE_GOLDEN=1 once, and read it"
        want = path.read_text()
        if text != want:
            import difflib
            diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), str(path), "now", n=2))
            raise AssertionError(f"{fname} differs from its golden:\n{diff[:6000]}")


def wire(obj):
    """As the object arrives from another process or node: through JSON (int keys become strings)."""
    return json.loads(json.dumps(obj))
