"""`ddpdoctor lint` as a user runs it: bad input, notebooks, --fix, exit codes, no torch import, corpus."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "lint_corpus"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}


def lint(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "lint", *map(str, args)], capture_output=True,
                          text=True, timeout=60, env=ENV, cwd=cwd)


BAD = "import torch\ns = torch.utils.data.DataLoader(range(3), shuffle=True, sampler=[0])\n"


@pytest.mark.torchjob
def test_syntax_error_is_one_line_with_file_and_line_and_the_other_files_are_linted(tmp_path):
    (tmp_path / "a.py").write_text("def f(:\n    pass\n")
    (tmp_path / "b.py").write_text(BAD)
    p = lint(tmp_path / "a.py", tmp_path / "b.py")
    assert p.returncode == 1  # b.py's error finding outranks a.py's bad input
    assert "Traceback" not in p.stderr + p.stdout
    err = [l for l in p.stderr.splitlines() if "a.py" in l]
    assert len(err) == 1 and f"{tmp_path / 'a.py'}:1: syntax error" in err[0]
    assert "b.py:2:" in p.stdout and "DL006" in p.stdout


@pytest.mark.torchjob
def test_python2_binary_huge_and_missing_inputs_get_one_line_each_and_exit_2(tmp_path):
    (tmp_path / "old.py").write_text('print "hello"\n')
    (tmp_path / "blob.py").write_bytes(b"\x00\x01\x02" * 100)
    (tmp_path / "big.py").write_text("x = 1\n" * (1024 * 1024))  # 6 MiB
    p = lint(tmp_path / "old.py", tmp_path / "blob.py", tmp_path / "big.py", tmp_path / "nope.py")
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 4
    assert any("old.py:1: Python 2 source" in l for l in lines)
    assert any("blob.py: skipped: binary file" in l for l in lines)
    assert any("big.py: skipped:" in l and "too large" in l for l in lines)
    assert any("nope.py: no such file or directory" in l for l in lines)


@pytest.mark.torchjob
def test_notebook_code_cells_are_linted_with_cell_positions(tmp_path):
    nb = {"cells": [
        {"cell_type": "markdown", "source": ["# title"]},
        {"cell_type": "code", "source": ["%matplotlib inline\n", "import torch\n"]},
        {"cell_type": "code", "source": ["dl = torch.utils.data.DataLoader(range(3), shuffle=True, sampler=[0])\n"]},
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    p = lint(tmp_path / "nb.ipynb")
    assert p.returncode == 1
    assert "nb.ipynb:cell 3:line 1:" in p.stdout and "DL006" in p.stdout
    (tmp_path / "broken.ipynb").write_text("{not json")
    p = lint(tmp_path / "broken.ipynb")
    assert p.returncode == 2 and "not a Jupyter notebook" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.torchjob
def test_fix_applies_safe_fixes_and_keeps_comments_and_formatting(tmp_path):
    src = textwrap.dedent("""\
        import argparse, os, torch
        # the data
        loader = torch.utils.data.DataLoader(
            range(8),   # keep me
            shuffle=True,
            sampler=torch.utils.data.DistributedSampler(range(8)),
        )
        parser = argparse.ArgumentParser()
        parser.add_argument('--local_rank', type=int)  # launcher option
        state = torch.load("ckpt.pt")
        """)
    f = tmp_path / "t.py"
    f.write_text(src)
    p = lint(f, "--fix", "--select", "DL006", "--select", "DL009", "--select", "DL002")
    out = f.read_text()
    assert "shuffle" not in out and "range(8),   # keep me" in out and "# the data" in out
    # both spellings and torchrun's LOCAL_RANK as the default: the fix removes the bug, not just the warning
    assert ("parser.add_argument('--local-rank', '--local_rank', type=int, "
            "default=int(os.environ.get(\"LOCAL_RANK\", 0)))  # launcher option") in out
    assert 'torch.load("ckpt.pt")' in out  # DL002's fix is unsafe: not applied by --fix alone
    assert "fixed 2" in p.stdout
    lint(f, "--fix", "--unsafe-fixes")
    assert 'torch.load("ckpt.pt", map_location="cpu")' in f.read_text()


@pytest.mark.torchjob
def test_json_output_and_rule_docs_and_usage_errors(tmp_path):
    (tmp_path / "b.py").write_text(BAD)
    p = lint(tmp_path / "b.py", "--json")
    d = json.loads(p.stdout)
    assert d["exit_code"] == 1 == p.returncode
    assert d["findings"][0]["rule"] == "DL006" and d["findings"][0]["fix"]["applicability"] == "safe"
    p = lint("--rule", "DL003")
    assert p.returncode == 0 and "## Why it matters" in p.stdout
    p = lint("--rule", "DL999")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    p = lint()
    assert p.returncode == 2 and "at least one PATH" in p.stderr
    p = lint(tmp_path, "--select", "DD1")
    assert p.returncode == 2


@pytest.mark.torchjob
def test_warnings_pass_unless_fail_on_warning(tmp_path):
    (tmp_path / "w.py").write_text("import torch\ns = torch.utils.data.DistributedSampler(range(3))\n")
    assert lint(tmp_path / "w.py").returncode == 0
    assert lint(tmp_path / "w.py", "--fail-on", "warning").returncode == 1


@pytest.mark.torchjob
def test_lint_never_imports_torch():
    code = ("import sys; from ddpdoctor.lint import lint_paths; "
            f"r = lint_paths([{str(CORPUS)!r}]); "
            "assert r.files >= 60 and r.findings; print('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


@pytest.mark.torchjob
def test_generated_rule_pages_are_in_sync():
    p = subprocess.run([sys.executable, "-m", "ddpdoctor.lint.gendocs", "--check"], capture_output=True, text=True,
                       timeout=60, env=ENV)
    assert p.returncode == 0, p.stdout + " run: python -m ddpdoctor.lint.gendocs"


def _entries():
    return json.loads((CORPUS / "manifest.json").read_text())["entries"]


@pytest.mark.parametrize("entry", [e for e in _entries() if not e["labels"]], ids=lambda e: e["file"])
def test_correct_corpus_scripts_get_no_error_finding(entry):
    """False positives are what users hate most: no clean script (dev or held-out) may get an error."""
    from ddpdoctor.lint import lint_paths
    res = lint_paths([str(CORPUS / entry["split"] / entry["file"])])
    assert not [f for f in res.findings if f.severity.label == "error"], [f.message for f in res.findings]
    assert not res.crashes and not res.problems


def test_corpus_has_a_frozen_held_out_third_by_source():
    es = _entries()
    split = [e for e in es if e["split"] in ("dev", "heldout")]
    assert len(split) >= 60
    held = [e for e in split if e["split"] == "heldout"]
    assert len(held) * 3 >= len(split)
    groups = {}
    for e in es:
        groups.setdefault(e["group"], set()).add(e["split"])
        assert e["source"].startswith("https://")
        assert (CORPUS / e["split"] / e["file"]).is_file()
    assert all(len(s) == 1 for s in groups.values()), "a source straddles the split"
