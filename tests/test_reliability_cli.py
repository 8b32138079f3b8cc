"""Issue 10: exit codes and output survive closed stdout, broken pipes and hostile values."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port

pytestmark = pytest.mark.torchjob  # real processes: the CLI as a subprocess (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent
DD = [sys.executable, "-m", "ddpdoctor"]
NETWORK_OK = ["network", "--master", "127.0.0.1", "--select", "DD80"]  # env audit only: passes on a clean env


def _env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "DDPDOCTOR_", "MASTER_", "PET_", "TORCHELASTIC", "NCCL_", "GLOO_"))}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _run(args, *, stdout="pipe", timeout=60):
    """stdout: 'pipe' (captured), 'closed' (fd 1 closed, like `>&-`), 'broken' (a pipe nobody reads)."""
    if stdout == "pipe":
        return subprocess.run([*DD, *args], capture_output=True, text=True, env=_env(), timeout=timeout)
    if stdout == "closed":
        return subprocess.run([*DD, *args], capture_output=True, text=True, env=_env(), timeout=timeout,
                              preexec_fn=lambda: os.close(1))
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write: EPIPE
    try:
        return subprocess.run([*DD, *args], stdout=w, stderr=subprocess.PIPE, text=True, env=_env(), timeout=timeout)
    finally:
        os.close(w)


def test_no_arguments_prints_the_normal_help():
    cp = _run([])
    assert cp.returncode == 0
    assert cp.stdout.startswith("Usage: ddpdoctor") and len(cp.stdout.splitlines()) > 5
    assert "error" not in cp.stderr


@pytest.mark.parametrize("args", [NETWORK_OK, ["explain", "DD201"], ["list-checks"],
                                  ["explain", "--log", str(ROOT / "tests" / "logs")]], ids=lambda a: a[0])
@pytest.mark.parametrize("how", ["closed", "broken"])
def test_closed_or_broken_stdout_is_not_a_crash(args, how):
    if args[0] == "explain" and len(args) == 3:
        logs = sorted(p for p in (ROOT / "tests" / "logs").rglob("*") if p.is_file())
        if not logs:
            pytest.skip("no sample log")
        args = ["explain", "--log", str(logs[0])]
    cp = _run(args, stdout=how)
    assert cp.returncode == 0, cp.stderr
    assert "internal error" not in cp.stderr and "Traceback" not in cp.stderr


def _fault_config(tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text('[thresholds]\nmin_dev_shm = "1000TiB"\n')  # a real fault on any node: DD601
    return str(cfg)


@pytest.mark.parametrize("how", ["pipe", "closed", "broken"])
def test_a_real_prolog_fault_exits_1_whatever_happens_to_stdout(tmp_path, how):
    cp = _run(["prolog", "--config", _fault_config(tmp_path), "--select", "DD601"], stdout=how)
    assert cp.returncode == 1, cp.stderr
    assert "internal error" not in cp.stderr


@pytest.mark.parametrize("args", [["network", "--deadline", "nan"], ["network", "--listen", "--timeout", "inf"],
                                  ["smoke", "--expect-busbw", "nan"], ["smoke", "--expect-busbw", "inf"],
                                  ["smoke", "--timeout", "nan"], ["cluster", "--probe-timeout", "nan"]])
def test_nan_and_inf_are_refused_with_a_json_error(args):
    cp = _run([*args, "--json"])
    assert cp.returncode == 2, (cp.stdout, cp.stderr)
    d = json.loads(cp.stdout)  # strict: json.loads accepts NaN, so check the text too
    assert d["exit_code"] == 2 and "finite" in d["error"]["message"] or "range" in d["error"]["message"]
    assert "NaN" not in cp.stdout and "Infinity" not in cp.stdout
    assert len(cp.stderr.strip().splitlines()) == 1


def test_json_error_paths_print_a_json_error_object():
    cp = _run(["network", "--port", "99999", "--json"])
    assert cp.returncode == 2
    assert json.loads(cp.stdout)["error"]["kind"] == "usage"
    cp = _run(["explain", "NO_SUCH_FAILURE", "--json"])
    assert cp.returncode == 2 and json.loads(cp.stdout)["exit_code"] == 2


def test_prolog_deadline_nan_is_a_usage_error(tmp_path):
    cp = _run(["prolog", "--deadline", "nan", "--strict"])
    assert cp.returncode == 2, cp.stderr


@pytest.mark.parametrize("text", ['[thresholds]\nmin_dev_shm = "' + "9" * 400 + 'T"\n',
                                  '[task]\nvariables = [["GLOO_SOCKET_IFNAME"]]\n',
                                  '[task]\nvariables = [{a = 1}]\n'])
def test_config_values_that_overflow_or_cannot_be_hashed_are_usage_errors(tmp_path, text):
    cfg = tmp_path / "site.toml"
    cfg.write_text(text)
    cp = _run(["prolog", "--strict", "--config", str(cfg)])
    assert cp.returncode == 2, cp.stderr
    assert "internal error" not in cp.stderr
    cp = _run(["prolog", "--config", str(cfg)])  # without --strict: logged, never a drain
    assert cp.returncode == 0


def test_prolog_json_error_paths_print_a_json_error(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[prolog]\nno_such_key = 1\n")
    cp = _run(["prolog", "--json", "--config", str(cfg)])
    assert cp.returncode == 0 and json.loads(cp.stdout)["error"]["kind"] == "usage"
    cp = _run(["prolog", "--json", "--no-such-option"])
    assert cp.returncode == 0 and json.loads(cp.stdout)["error"]["kind"] == "usage"
    cp = _run(["prolog", "--json", "--strict", "--deadline", "nan"])
    assert cp.returncode == 2 and json.loads(cp.stdout)["exit_code"] == 2


@pytest.mark.parametrize("how", ["closed", "broken"])
def test_listen_with_closed_stdout_still_exits_by_its_verdict(how):
    port = free_port()
    cp = _run(["network", "--listen", "--port", str(port), "--timeout", "0.5"], stdout=how)
    assert cp.returncode == 1, cp.stderr  # nobody came
    assert "internal error" not in cp.stderr and "Traceback" not in cp.stderr


@pytest.mark.parametrize("how", ["closed", "broken"])
def test_smoke_with_closed_stdout_exits_by_its_verdict(how):
    cp = _run(["smoke", "--nproc", "1", "--quick", "--backend", "gloo"], stdout=how, timeout=180)
    assert cp.returncode == 0, cp.stderr
    assert "internal error" not in cp.stderr and "Traceback" not in cp.stderr
