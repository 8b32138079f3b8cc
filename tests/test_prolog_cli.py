"""`ddpdoctor prolog` as Slurm runs it, on this host: exit codes, one-line faults, never a drain for
ddpdoctor's own problems. (The same against a real Slurm: tests/test_slurm_prolog.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torchjob  # real processes: the CLI as a subprocess (tests/conftest.py)

DD = [sys.executable, "-m", "ddpdoctor", "prolog"]


def prolog(*args, env=None, tmp_path=None, config=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "DDPDOCTOR"))}
    e.update(env or {})
    argv = [*DD, *args]
    if config is not None:
        p = tmp_path / "site.toml"
        p.write_text(config)
        argv += ["--config", str(p)]
    return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=30)


def test_a_node_fault_is_one_line_and_exit_1(tmp_path):
    # a site minimum above any real /dev/shm turns this host into a faulty node, deterministically
    r = prolog("--select", "DD601", "--report-file", str(tmp_path / "r-%n-%j.json"), tmp_path=tmp_path,
               config='[thresholds]\nmin_dev_shm = "900T"\n', env={"SLURMD_NODENAME": "n7", "SLURM_JOB_ID": "42"})
    assert r.returncode == 1, r.stderr
    (line,) = r.stdout.splitlines()
    assert line.startswith("ddpdoctor: DD601 /dev/shm is ") and line.endswith("below the site minimum of 900 TiB")
    rep = json.loads((tmp_path / "r-n7-42.json").read_text())
    assert rep["prolog"]["faults"] == [line] and rep["prolog"]["exit_code"] == 1 and rep["prolog"]["node"] == "n7"
    assert not rep["prolog"]["drain_requested"]


def test_a_healthy_node_prints_nothing(tmp_path):
    r = prolog("--select", "DD60", tmp_path=tmp_path, config='[thresholds]\nmin_dev_shm = "4K"\n')
    assert (r.returncode, r.stdout) == (0, ""), r.stderr


def test_warn_only_logs_the_fault_without_failing_the_node(tmp_path):
    r = prolog("--select", "DD601", tmp_path=tmp_path,
               config='[prolog]\nwarn_only = ["DD601"]\n[thresholds]\nmin_dev_shm = "900T"\n')
    assert r.returncode == 0 and r.stdout == "" and "ddpdoctor: warning: DD601 /dev/shm is" in r.stderr


def test_usage_and_config_errors_are_loud_but_never_a_drain(tmp_path):
    r = prolog("--no-such-option")
    assert r.returncode == 0 and "ddpdoctor: error: prolog: No such option" in r.stderr and "node not failed" in r.stderr
    assert prolog("--no-such-option", "--strict").returncode == 2
    r = prolog(tmp_path=tmp_path, config="[prolog]\ndeadlien = 3\n")
    assert r.returncode == 0 and "unknown key prolog.deadlien" in r.stderr and r.stdout == ""
    assert prolog("--strict", tmp_path=tmp_path, config="[prolog]\ndeadlien = 3\n").returncode == 2
    r = prolog("--deadline", "-1")
    assert r.returncode == 0 and "--deadline -1 s is out of range" in r.stderr


def test_a_crash_is_logged_and_exits_0_unless_strict(tmp_path):
    r = prolog("--report-file", str(tmp_path / "crash.json"), env={"DDPDOCTOR_TEST_CRASH": "prolog"})
    assert r.returncode == 0 and r.stdout == ""
    assert "internal error, not a node fault" in r.stderr and "Traceback" not in r.stderr
    assert "DDPDOCTOR_TEST_CRASH" in json.loads((tmp_path / "crash.json").read_text())["prolog"]["crash"]
    assert prolog("--strict", env={"DDPDOCTOR_TEST_CRASH": "prolog"}).returncode == 3


def test_the_task_prolog_prints_nothing_outside_a_job_and_never_fails():
    r = prolog("--task")
    assert (r.returncode, r.stdout) == (0, "")
    r = prolog("--task", env={"SLURM_JOB_NODELIST": "node[3-1]"})  # a list Slurm would never write
    assert (r.returncode, r.stdout) == (0, "")
    r = prolog("--task", "--bogus")
    assert (r.returncode, r.stdout) == (0, "")
