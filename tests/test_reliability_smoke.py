"""Issue 10: smoke names what is wrong with a rank from its process state, never a network problem
for a process that exists but does not run; one rank has no bandwidth to report."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from ddpdoctor.render import smoke as render_smoke
from ddpdoctor.model import Status
from ddpdoctor.smoke import plan as P
from ddpdoctor.smoke.report import build_report
from ddpdoctor.smoke.supervise import Supervisor, WorkerProc


def _supervisor_with_frozen_rank1():
    cfg = P.SmokeConfig(timeout=10)
    w0 = WorkerProc(rank=0, env={})
    w1 = WorkerProc(rank=1, env={})
    w1.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    w1.proc.send_signal(signal.SIGSTOP)  # frozen before it ever reached the store
    return Supervisor(cfg, [w0, w1], 2, standalone=True), cfg, w1


def _world(states):
    return {"world_size": 2, "backend": "gloo", "records": {},
            "verdict": {"kind": "stall", "late": [1], "after_s": 10.5, "detected_by": "rank 0's watchdog",
                        "timeout_s": 10, "states": states}}


@pytest.mark.torchjob
def test_a_rank_stopped_before_the_store_is_named_stopped_not_a_network_problem():
    sup, cfg, w1 = _supervisor_with_frozen_rank1()
    try:
        import time
        for _ in range(50):  # SIGSTOP is asynchronous
            from ddpdoctor.smoke.progress import process_state
            if process_state(w1.proc.pid) == "stopped":
                break
            time.sleep(0.05)
        sup._kill(w1, "the run ended")  # records its state before ending it, as at the end of a run
        world = sup._annotate(_world([
            {"rank": 0, "seen": True, "phase": "store", "index": 1, "in_collective": False, "pid": 1,
             "host": "h", "heartbeat_age_s": 0.1, "in_phase_s": 10.0},
            {"rank": 1, "seen": False, "waited_s": 10.5}]))
    finally:
        w1.proc.wait(timeout=10)
    rep = build_report(world, cfg, launcher="standalone")
    dd501 = next(r for r in rep.results if r.id == "DD501")
    msgs = [f.message for f in dd501.findings]
    assert any("rank 1" in m and "stopped" in m for m in msgs), msgs
    assert not any("never connected" in m for m in msgs), msgs
    cmds = [c for f in dd501.findings if f.fix for c in f.fix.commands]
    assert f"kill -CONT {w1.proc.pid}" in " ".join(cmds)
    assert not any("ddpdoctor network" in c for c in cmds)


def test_a_rank_that_never_came_with_no_process_known_still_says_never_connected():
    cfg = P.SmokeConfig(timeout=10)
    rep = build_report(_world([{"rank": 0, "seen": True, "phase": "store", "index": 1, "in_collective": False,
                                "pid": 1, "host": "h", "heartbeat_age_s": 0.1, "in_phase_s": 10.0},
                               {"rank": 1, "seen": False, "waited_s": 10.5}]), cfg, launcher="torchrun")
    dd501 = next(r for r in rep.results if r.id == "DD501")
    assert dd501.status is Status.FAIL
    assert any("never connected" in f.message for f in dd501.findings)


def _gpu_world():
    """As the one-H100 run saw it: rank 1 failed in init (invalid device ordinal), rank 0 waits."""
    states = [{"rank": 0, "seen": True, "phase": "init", "index": 2, "in_collective": True, "pid": 10, "host": "g",
               "heartbeat_age_s": 0.1, "in_phase_s": 12.0, "error": None},
              {"rank": 1, "seen": True, "phase": "init", "index": 2, "in_collective": False, "pid": 11, "host": "g",
               "heartbeat_age_s": 0.1, "in_phase_s": 12.0,
               "error": "CUDA error: invalid device ordinal"}]
    w = _world(states)
    w["verdict"]["kind"] = "error"
    return w


def test_a_rank_that_failed_comes_first_and_the_transport_is_not_blamed():
    w = _gpu_world()
    w["records"] = {"1": {"rank": 1, "pid": 11, "host": "g",
                          "error": {"phase": "init", "message": "CUDA error: invalid device ordinal"}}}
    rep = build_report(w, P.SmokeConfig(timeout=10), launcher="standalone")
    dd501 = next(r for r in rep.results if r.id == "DD501")
    msgs = [f.message for f in dd501.findings]
    assert msgs and "rank 1" in msgs[0] and "invalid device ordinal" in msgs[0], msgs
    assert not any("transport" in (f.message + f.hint) for f in dd501.findings), msgs


def test_a_failure_only_the_watchdog_saw_is_still_named_and_not_a_transport_problem():
    rep = build_report(_gpu_world(), P.SmokeConfig(timeout=10), launcher="standalone")
    dd501 = next(r for r in rep.results if r.id == "DD501")
    msgs = [f.message for f in dd501.findings]
    assert any("invalid device ordinal" in m for m in msgs), msgs
    assert not any("transport" in (f.message + f.hint) for f in dd501.findings), msgs


def test_one_rank_reports_no_bandwidth_only_that_it_needs_two():
    rec = {"rank": 0, "pid": 1, "host": "g", "phases": {"init": 0.1},
           "bandwidth": [{"size": 1 << 26, "times": [2.5e-5, 2.5e-5, 2.5e-5]}], "correctness": []}
    world = {"world_size": 1, "backend": "nccl", "records": {"0": rec}}
    rep = build_report(world, P.SmokeConfig(timeout=10), launcher="standalone")
    dd503 = next(r for r in rep.results if r.id == "DD503")
    assert dd503.status is Status.SKIP and "two or more ranks" in dd503.reason
    text = render_smoke.text(rep)
    assert "needs two or more ranks" in text and "GB/s" not in text
    assert rep.to_dict()["bandwidth"] == []


def _srun_env(**kw):
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "0",
           "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_NODEID": "0",
           "SLURM_JOB_ID": "1234"}
    env.update(kw)
    return env


import pytest  # noqa: E402

from ddpdoctor import launch  # noqa: E402
from ddpdoctor.validate import BadInput  # noqa: E402


@pytest.mark.parametrize("kw", [{"SLURM_NODEID": "junk"}, {"SLURM_NODEID": "²"}, {"SLURM_PROCID": "٣"},
                                {"SLURM_NTASKS": "1_0"}])
def test_malformed_slurm_numbers_are_bad_input_not_a_crash(kw):
    with pytest.raises(BadInput):
        launch.detect(_srun_env(**kw))


@pytest.mark.parametrize("job", ["²", "١٢٣", "12x", ""])
def test_a_job_id_that_is_not_ascii_digits_keeps_the_default_port(job):
    assert launch.detect(_srun_env(SLURM_JOB_ID=job)).master_port == launch.DEFAULT_PORT


def test_an_ascii_job_id_spreads_the_port():
    assert launch.detect(_srun_env(SLURM_JOB_ID="1234")).master_port == launch.DEFAULT_PORT + 234


def _smoke_cli(tmp_path, argv_prefix, *args):
    import os
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "MASTER_", "RANK", "WORLD_SIZE",
                                                                   "LOCAL_", "TORCHELASTIC", "PET_", "OMPI_", "PMI_"))}
    env["PYTHONPATH"] = os.pathsep.join(argv_prefix + [str(root)])
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "smoke", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.torchjob
def test_smoke_without_torch_says_torch_is_missing_and_how_to_install_it(tmp_path):
    # A Python whose ranks cannot import torch (the boundary: we cannot uninstall it here)
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    cp = _smoke_cli(tmp_path, [str(tmp_path)], "--nproc", "2", "--timeout", "5", "--json")
    assert cp.returncode == 1, cp.stderr
    import json
    rep = json.loads(cp.stdout)
    msgs = [f["message"] + " " + f["hint"] for r in rep["results"] for f in r["findings"]]
    assert any("torch cannot be imported" in m and "download.pytorch.org/whl/cpu" in m for m in msgs), msgs
    assert not any("OOM" in m or "phase 'start'" in m for m in msgs), msgs


@pytest.mark.torchjob
def test_smoke_checks_for_torch_before_starting_ranks():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from ddpdoctor.cli import main; main(['smoke', '--nproc', '1'])\n")
    import os
    from pathlib import Path
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert cp.returncode == 2
    assert "torch is not installed" in cp.stderr and "download.pytorch.org/whl/cpu" in cp.stderr
