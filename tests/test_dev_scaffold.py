"""The guides work as written: each is followed literally in a scratch copy of the repository.

docs/writing-a-check.md, writing-a-failure-mode.md and writing-a-command.md are five steps each: `$ ...`
lines in ```console blocks are run as written (no shell), a block titled with a path
(```python title="ddpdoctor/checks/nic.py") is what that file, or the scaffolded function it names,
becomes. The tests the guide runs must pass in the copy, and the files a newcomer touched are counted
(issue 20: a check <= 3, a failure mode <= 2, a subcommand <= 4; generated pages are counted apart).
"""
import ast
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchjob  # real processes: the scaffold and a scratch copy's tests run as subprocesses (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("ddpdoctor", "docs", "tests", "pyproject.toml")
FENCE = re.compile(r"^```(\w+)(?: title=\"([^\"]+)\")?\n(.*?)^```\n", re.S | re.M)
IGNORED = ("__pycache__", ".pytest_cache")


def scratch_copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns(*IGNORED, "lint_corpus", "corpus"))
        else:
            shutil.copy2(src, repo / name)
    return repo


def snapshot(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): hashlib.sha1(p.read_bytes()).hexdigest() for p in repo.rglob("*")
            if p.is_file() and not any(part in IGNORED for part in p.parts)}


def run(repo: Path, argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    if argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=timeout, env=env)


def replace_function(text: str, block: str) -> str | None:
    """`text` with the top-level function that starts like `block` (same first line up to its first comma:
    `@check("DD306",`) replaced by `block`; None when `text` has no such function."""
    head = block.splitlines()[0].split(",")[0]
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            lines = text.splitlines(keepends=True)
            if lines[first - 1].startswith(head):
                return "".join(lines[:first - 1]) + block + "".join(lines[node.end_lineno:])
    return None


def follow(guide: str, repo: Path) -> list[str]:
    """Do what the guide says, step by step; the output of each command, for failure messages."""
    text = (repo / "docs" / guide).read_text()
    steps = re.findall(r"^### (\d+)\. ", text, re.M)
    assert steps == [str(i) for i in range(1, len(steps) + 1)] and len(steps) <= 5, f"{guide}: steps {steps}"
    body = text[text.index("### 1. "):]
    body = body[:body.index("\n## ")] if "\n## " in body else body
    log = []
    for lang, title, code in FENCE.findall(body):
        if lang == "console":
            for line in code.splitlines():
                if line.startswith("$ "):
                    p = run(repo, shlex.split(line[2:]))
                    log.append(f"{line}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
                    assert p.returncode == 0, "\n".join(log)
        elif title:
            path = repo / title
            new = replace_function(path.read_text(), code) if path.exists() and code.startswith("@") else None
            path.write_text(new if new is not None else code)
    return log


def touched(before: dict, after: dict) -> tuple[list[str], list[str]]:
    """(files a person or a scaffold wrote, files generate-all wrote: docs/reference/ and marked tables)."""
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    return [p for p in changed if not p.startswith("docs/")], [p for p in changed if p.startswith("docs/")]


def check_page_and_tables(repo, generated):
    assert {"docs/reference/checks/DD306.md", "docs/reference/checks/README.md", "docs/network.md",
            "docs/slurm.md"} <= set(generated)
    page = (repo / "docs" / "reference" / "checks" / "DD306.md").read_text()
    assert "- `DD306.spaces`" in page and "parseStringList" in page


def mode_page(repo, generated):
    assert "docs/reference/checks/CUDA_DEVICE_SIDE_ASSERT.md" in generated
    p = run(repo, ["python", "-m", "ddpdoctor", "explain", "--json", "--log",
                   "tests/logs/CUDA_DEVICE_SIDE_ASSERT/excerpt-cuda-device-side-assert.log"])
    assert json.loads(p.stdout)["diagnoses"][0]["failure"] == "CUDA_DEVICE_SIDE_ASSERT", p.stdout


def command_runs(repo, generated):
    p = run(repo, ["python", "-m", "ddpdoctor", "vars"])
    assert p.returncode == 0 and "vars" in run(repo, ["python", "-m", "ddpdoctor", "--help"]).stdout, p.stderr


@pytest.mark.parametrize("guide,most,wanted,then", [
    ("writing-a-check.md", 3, {"ddpdoctor/checks/nic.py", "tests/test_check_dd306.py"}, check_page_and_tables),
    ("writing-a-failure-mode.md", 2, {"ddpdoctor/catalog/modes/CUDA_DEVICE_SIDE_ASSERT.toml",
                                      "tests/logs/CUDA_DEVICE_SIDE_ASSERT/excerpt-cuda-device-side-assert.log"},
     mode_page),
    ("writing-a-command.md", 4, {"ddpdoctor/commands.py", "ddpdoctor/cli/vars.py", "ddpdoctor/facts/vars.py",
                                 "tests/test_command_vars.py"}, command_runs),
], ids=["check", "failure-mode", "command"])
def test_the_guide_works_when_followed_literally(tmp_path, guide, most, wanted, then):
    repo = scratch_copy(tmp_path)
    before = snapshot(repo)
    follow(guide, repo)
    hand, generated = touched(before, snapshot(repo))
    print(f"{guide}: {len(hand)} file(s) by hand or scaffold {hand}; generated {generated}")
    assert set(hand) == wanted and len(hand) <= most, (hand, generated)
    then(repo, generated)


def test_scaffolds_refuse_used_ids_and_bad_input_in_one_line(tmp_path):
    repo = scratch_copy(tmp_path)
    before = snapshot(repo)
    cases = [
        (["new-check", "DD301", "x", "--category", "nic"], "DD301 is already used"),
        (["new-check", "DD306", "x", "--category", "gpu"], "DD306 is in category 'nic'"),
        (["new-check", "DD3", "x", "--category", "nic"], "bad check id"),
        (["new-check", "DD306", "x", "--category", "nic", "--tags", "netwrok"], "name no command"),
        (["new-check", "DD901", "x", "--category", "ddpdoctor"], "--tags"),
        (["new-mode", "MTU_MISMATCH"], "MTU_MISMATCH is already used"),
        (["new-mode", "lowercase"], "bad failure id"),
        (["new-mode", "NEW_THING", "--category", "nope"], "unknown category"),
        (["new-command", "network"], "exists already"),
        (["new-command", "Bad_Name"], "bad command name"),
        (["new-check"], "required"),
        (["frobnicate"], "invalid choice"),
    ]
    for argv, says in cases:
        p = run(repo, ["python", "-m", "ddpdoctor.dev", *argv], timeout=60)
        assert p.returncode == 2 and p.stdout == "", (argv, p.stdout, p.stderr)
        assert p.stderr.count("\n") == 1 and says in p.stderr, (argv, p.stderr)
    assert snapshot(repo) == before  # a refusal writes nothing


def test_a_retired_check_id_is_not_reused(tmp_path):
    # ids are never reused: one that only a failure mode still names (its check gone) is taken
    repo = scratch_copy(tmp_path)
    mode = repo / "ddpdoctor" / "catalog" / "modes" / "MTU_MISMATCH.toml"
    mode.write_text(mode.read_text().replace("checks = [", "checks = ['DD399', ", 1)
                    if "checks = [" in mode.read_text() else mode.read_text() + "\n# retired: DD399\n")
    p = run(repo, ["python", "-m", "ddpdoctor.dev", "new-check", "DD399", "x", "--category", "nic"], timeout=60)
    assert p.returncode == 2 and "DD399 is already used" in p.stderr and "next free id in nic: DD306" in p.stderr


def test_new_rule_delegates_to_the_lint_scaffold(tmp_path):
    repo = scratch_copy(tmp_path)
    p = run(repo, ["python", "-m", "ddpdoctor.dev", "new-rule", "DL099", "some_rule"], timeout=60)
    if not (repo / "ddpdoctor" / "lint" / "new_rule.py").exists():
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no ddpdoctor/lint/new_rule.py" in p.stderr
        return
    assert p.returncode == 0, p.stderr  # the lint scaffold's own guide and test cover the rest
    assert list((repo / "ddpdoctor" / "lint" / "rules").glob("dl099_some_rule.py"))
