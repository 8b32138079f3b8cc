"""docs/writing-a-lint-rule.md, followed literally in a scratch copy: its commands run, its files
are written, and the new rule's fixtures pass the suite (so the guide cannot drift from the code)."""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "writing-a-lint-rule.md"
BLOCK = re.compile(r'```(console|python title="([^"]+)")\n(.*?)```', re.S)


def steps():
    for kind, path, body in BLOCK.findall(GUIDE.read_text()):
        if kind == "console":
            for line in body.splitlines():
                if line.startswith("$ "):
                    yield "run", shlex.split(line[2:])
        else:
            yield "write", (path, body)


def test_the_guide_has_at_most_five_steps():
    assert len(re.findall(r"^### \d\.", GUIDE.read_text(), re.M)) <= 5


@pytest.mark.torchjob  # runs the scaffold and the tests as subprocesses (tests/conftest.py)
def test_following_the_guide_literally_gives_a_working_rule(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "ddpdoctor", root / "ddpdoctor", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "docs" / "reference" / "lint", root / "docs" / "reference" / "lint")
    (root / "tests").mkdir()
    shutil.copy(REPO / "tests" / "test_lint_fixtures.py", root / "tests")
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1"}
    ran = []
    for kind, what in steps():
        if kind == "write":
            path, body = what
            (root / path).write_text(body)
            continue
        cmd = [sys.executable if what[0] == "python" else what[0], *what[1:]]
        p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"{what}: {p.stdout[-2000:]}{p.stderr[-2000:]}"
        ran.append(what)
    assert [w[:3] for w in ran] == [["python", "-m", "ddpdoctor.lint.new_rule"], ["python", "-m", "ddpdoctor.lint.gendocs"],
                                    ["python", "-m", "pytest"]]
    page = (root / "docs" / "reference" / "lint" / "DL015.md").read_text()
    assert "torch 2.2 renamed the variable" in page and 'os.environ["NCCL_BLOCKING_WAIT"] = "1"  # expect: DL015' in page
    out = subprocess.run([sys.executable, "-m", "ddpdoctor", "lint", "ddpdoctor/lint/rules/fixtures/DL015/bad.py"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=60).stdout
    assert "DL015 warning  NCCL_BLOCKING_WAIT is the old name" in out
