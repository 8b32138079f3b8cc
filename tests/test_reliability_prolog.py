"""Issue 10: the prolog keeps its deadline whatever it reads, and its exit code is the contract."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DD = [sys.executable, "-m", "ddpdoctor"]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "DDPDOCTOR_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


@pytest.mark.parametrize("task", [False, True], ids=["prolog", "task"])
@pytest.mark.torchjob
def test_a_config_path_that_blocks_does_not_hang_the_prolog(tmp_path, task):
    fifo = tmp_path / "ddpdoctor.toml"
    os.mkfifo(fifo)  # open() for reading blocks until a writer comes: like a hung NFS mount
    argv = [*DD, "prolog", "--config", str(fifo), "--deadline", "2"]
    if task:
        argv = [*DD, "prolog", "--task", "--config", str(fifo)]
    t0 = time.monotonic()
    try:
        cp = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the prolog hung on a config path that blocks")
    took = time.monotonic() - t0
    assert cp.returncode == 0, cp.stderr   # not a node fault, and a TaskProlog must not fail the task
    assert cp.stdout == ""
    assert "not a regular file" in cp.stderr
    assert took < 15


@pytest.mark.parametrize("task", [False, True], ids=["prolog", "task"])
@pytest.mark.torchjob
def test_a_config_read_that_hangs_is_cut_by_the_deadline(task):
    # a hung NFS mount blocks even a non-blocking open: only the watchdog helps (simulated: load() never returns)
    args = ["prolog", "--task"] if task else ["prolog", "--deadline", "2"]
    code = ("import time, ddpdoctor.siteconfig as c\n"
            "c.load = lambda path=None: time.sleep(120)\n"
            "from ddpdoctor.cli import main\n"
            f"main({args!r})\n")
    t0 = time.monotonic()
    try:
        cp = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the prolog hung while reading its configuration")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == "" and "deadline" in cp.stderr
    assert time.monotonic() - t0 < 15


def test_report_file_is_never_written_through_a_planted_symlink(tmp_path):
    from ddpdoctor.slurm.prolog import write_report
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "report.json"
    # the old code wrote to f"{path}.tmp{pid}": plant symlinks for a range of pids, and at the path
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        os.symlink(victim, f"{target}.tmp{pid}")
    assert write_report(str(target), {"ok": 1}) == ""
    assert victim.read_text() == "precious\n"
    assert not target.is_symlink() and '"ok": 1' in target.read_text()
    # a symlink planted at the report path itself is replaced, not followed
    target.unlink()
    os.symlink(victim, target)
    assert write_report(str(target), {"ok": 2}) == ""
    assert victim.read_text() == "precious\n" and not target.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report")] == []


def test_cluster_node_lists_are_never_written_through_a_planted_symlink(tmp_path):
    from ddpdoctor.cluster.report import write_lists as _write_lists
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        os.symlink(victim, tmp_path / f"passing_nodes.tmp{pid}")
    os.symlink(victim, tmp_path / "failing_nodes")
    paths, err = _write_lists(str(tmp_path), "node[1-3]", "node4")
    assert err == "" and victim.read_text() == "precious\n"
    assert (tmp_path / "passing_nodes").read_text() == "node[1-3]\n"
    assert not (tmp_path / "failing_nodes").is_symlink()
