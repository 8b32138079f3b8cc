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
    assert "deadline" in cp.stderr
    assert took < 15
