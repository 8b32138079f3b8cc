"""`lint` and `lint --fix` on hostile trees (issue 21): --fix never rewrites a file that changed since
it was linted, never writes through a symbolic link or outside the paths given, one unwritable file
is one line (exit 2) and the others are still fixed; a link to /proc/kmsg, a FIFO or deeply nested
code are one line each, within the bounds."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from hostile import ROOT, assert_bounded, run_bounded
from ddpdoctor.lint import fix as fixmod
from ddpdoctor.lint import lint_paths

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob

BAD = "import torch\ns = torch.utils.data.DataLoader(range(3), shuffle=True, sampler=[0])\n"
FIXED = "import torch\ns = torch.utils.data.DataLoader(range(3), sampler=[0])\n"


def test_fix_leaves_a_file_edited_after_it_was_linted(tmp_path):
    f = tmp_path / "train.py"
    f.write_text(BAD)
    time.sleep(0.1)
    since = time.time_ns()
    findings = lint_paths([str(f)], ("DL006",)).findings
    assert findings
    # the user (or an editor) rewrites the file between the lint and the fix: the findings are stale
    edited = "# a new first line moves every call\n" + BAD.replace("range(3)", "range(4)")
    f.write_text(edited)
    left = []
    done = fixmod.apply(findings, roots=[str(tmp_path)], linted_since_ns=since, skipped=left)
    assert done == {} and f.read_text() == edited
    assert left and "changed while it was linted" in left[0][1]


def test_fix_applies_when_nothing_changed(tmp_path):
    f = tmp_path / "train.py"
    f.write_text(BAD)
    time.sleep(0.1)
    o = run_bounded(["lint", "--fix", "--select", "DL006", str(f)])
    assert_bounded(o)
    assert f.read_text() == FIXED, o.stdout + o.stderr


def test_fix_never_writes_through_a_symlink_out_of_the_tree(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.py"
    victim.write_text(BAD)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link.py").symlink_to(victim)
    (tree / "own.py").write_text(BAD)
    time.sleep(0.1)
    o = run_bounded(["lint", "--fix", "--select", "DL006", str(tree)])
    assert_bounded(o)
    assert victim.read_text() == BAD, "wrote through the symlink"
    assert (tree / "own.py").read_text() == FIXED
    assert "symbolic link" in o.stderr
    assert o.returncode == 1, (o.stdout, o.stderr)  # link.py's finding is still there


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare for a read-only bind mount")
def test_an_unwritable_file_is_one_line_and_the_others_are_still_fixed(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("a.py", "b.py", "c.py"):
        (tree / name).write_text(BAD)
    time.sleep(0.1)
    b = shlex.quote(str(tree / "b.py"))
    # b.py read-only for root too: a read-only bind mount of it, in a mount namespace of this command only
    script = (f"mount --bind {b} {b} && mount -o remount,bind,ro {b} && exec {shlex.quote(sys.executable)} "
              f"-m ddpdoctor lint --fix --select DL006 {shlex.quote(str(tree))}")
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                       text=True, timeout=30, env={**os.environ, "PYTHONPATH": ROOT})
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)  # b.py's finding stays
    assert (tree / "a.py").read_text() == FIXED and (tree / "c.py").read_text() == FIXED
    assert (tree / "b.py").read_text() == BAD
    assert [line for line in p.stderr.splitlines() if "b.py" in line] == [
        f"{tree / 'b.py'}: cannot write: Read-only file system"]


def test_a_link_to_proc_kmsg_and_a_fifo_in_a_tree_are_one_line_each(tmp_path):
    if not os.access("/proc/kmsg", os.R_OK):
        pytest.skip("/proc/kmsg is not readable here")
    (tmp_path / "kmsg.py").symlink_to("/proc/kmsg")
    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "ok.py").write_text(BAD)
    o = run_bounded(["lint", str(tmp_path)])
    assert_bounded(o)
    assert o.returncode == 1  # ok.py's finding
    assert len([line for line in o.stderr.splitlines() if "kmsg.py" in line]) == 1
    assert len([line for line in o.stderr.splitlines() if "fifo.py" in line]) == 1


@pytest.mark.parametrize("code", [
    "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n",          # the parser's own limit
    "x = " + "[" * 180 + "1" + "]" * 180 + "\n",            # parses, then nests deeper than a walker's stack
    "x = 1" + " + 1" * 30000 + "\n",                        # a deep left-leaning BinOp chain
    "\n".join(" " * i + "if x:" for i in range(95)) + "\n" + " " * 95 + "pass\n",  # 95 nested blocks
])
def test_deeply_nested_python_is_bad_input_not_a_crash(tmp_path, code):
    f = tmp_path / "deep.py"
    f.write_text(code)
    o = run_bounded(["lint", str(f)])
    assert_bounded(o)
    o = run_bounded(["lint", "--fix", str(f)])
    assert_bounded(o)


def test_a_deeply_nested_notebook_is_bad_input_not_a_crash(tmp_path):
    f = tmp_path / "deep.ipynb"
    f.write_text('{"cells": ' + "[" * 100000 + "]" * 100000 + "}")
    o = run_bounded(["lint", str(f)])
    assert_bounded(o)
    assert o.returncode == 2
