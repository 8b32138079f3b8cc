"""`ddpdoctor arm`: flight recorder on, dumps into a writable per-job directory, never overriding the user."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.inspect.arm import arm_lines, arm_vars

ROOT = Path(__file__).resolve().parent.parent


def test_arms_the_flight_recorder_into_a_private_per_job_directory(tmp_path):
    lines = arm_lines({"SLURM_JOB_ID": "4121"}, root=str(tmp_path))
    d = tmp_path / "4121"
    assert lines == ["export TORCH_FR_BUFFER_SIZE=2000", "export TORCH_NCCL_TRACE_BUFFER_SIZE=2000",
                     "export TORCH_NCCL_DUMP_ON_TIMEOUT=1", f"export TORCH_FR_DUMP_TEMP_FILE={d}/fr_rank_",
                     f"export TORCH_NCCL_DEBUG_INFO_TEMP_FILE={d}/fr_rank_"]
    assert d.is_dir() and (d.stat().st_mode & 0o777) == 0o700


def test_what_the_user_set_wins_even_under_the_other_name():
    v = arm_vars({"TORCH_NCCL_TRACE_BUFFER_SIZE": "0", "TORCH_NCCL_DUMP_ON_TIMEOUT": ""}, directory="/x")
    assert v == {"TORCH_FR_DUMP_TEMP_FILE": "/x/fr_rank_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/x/fr_rank_"}


def test_an_unwritable_directory_is_said_not_exported(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    (line,) = arm_lines({"SLURM_JOB_ID": "1"}, root=str(f))
    assert line.startswith("# ddpdoctor: cannot write")


@pytest.mark.torchjob
def test_the_command_prints_lines_a_shell_can_eval_and_exit_0(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SLURM_JOB_ID": "77"}
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "arm", "--dir", str(tmp_path), "--pg-timeout", "10"],
                       capture_output=True, text=True, env=env, timeout=30)
    assert p.returncode == 0, p.stderr
    out = subprocess.run(["bash", "-c", p.stdout + "\necho $TORCH_NCCL_DUMP_ON_TIMEOUT $TORCH_FR_BUFFER_SIZE"],
                         capture_output=True, text=True, timeout=10).stdout.split()
    assert out == ["1", "2000"] and "timedelta(minutes=10)" in p.stdout
    bad = subprocess.run([sys.executable, "-m", "ddpdoctor", "arm", "--entries", "0"], capture_output=True,
                         text=True, env=env, timeout=30)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
