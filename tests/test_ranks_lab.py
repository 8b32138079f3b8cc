"""probes/ranks.py on REAL launches (CPU, Gloo): which process is a rank for torchrun with a `bash -c`
rank, mp.spawn, an elastic restart, mpirun, and two jobs on one node. Each inspect only looks: the
jobs keep running; each job runs in a session of its own and is killed by its tree afterwards.
(srun python and srun torchrun: tests/test_inspect_gather_lab.py, in the Slurm lab.)"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_port

from test_inspect_torchjob import Job, _workers, findings, inspect

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "inspect_jobs"


def line_of(name: str, marker: str) -> int:
    src = (JOBS / name).read_text().splitlines()
    return next(i + 1 for i, s in enumerate(src) if s.rstrip().endswith(f"# {marker}"))


class Launch(Job):
    """A job started from any argv (Job's teardown: process groups of the whole tree, nothing left)."""

    def __init__(self, tmp: Path, argv: list[str], env: dict, name: str):
        self.log = tmp / f"{name}.log"
        self.proc = subprocess.Popen(argv, env={**os.environ, "OMP_NUM_THREADS": "1", **env}, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True, cwd=str(tmp))
        self.pids: set[int] = set()

    def wait_for(self, pattern: str, count: int, timeout: float = 120) -> list[re.Match]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = list(re.finditer(pattern, self.log.read_text()))
            if len(found) >= count:
                time.sleep(1.0)  # let the odd rank reach its line
                self.pids |= _tree_pids(self.proc.pid)
                return found
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.3)
        raise AssertionError(f"not ready:\n{self.log.read_text()[-3000:]}")


def _tree_pids(root: int) -> set[int]:
    import psutil
    try:
        return {root} | {c.pid for c in psutil.Process(root).children(recursive=True)}
    except psutil.Error:
        return set()


@pytest.fixture
def launch(tmp_path):
    started = []

    def start(*a, **kw):
        j = Launch(tmp_path, *a, **kw)
        started.append(j)
        return j
    yield start
    for j in started:
        j.kill()


def torchrun(*args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", *args]


def test_a_rank_started_through_bash_c_is_the_python_below_the_shell_and_is_judged(launch):
    j = launch(torchrun("--nproc-per-node=2", "--no-python", "bash", "-c", f"{sys.executable} {JOBS / 'hang.py'}; true"),
               {"HANG_MODE": "other", "HANG_RANK": "1"}, "bashc")
    j.wait_for(r"ready \d", 2)
    rc, rep = inspect("--pid", str(j.proc.pid))
    assert rc == 1
    assert all(r["cmdline"].startswith(sys.executable) and len(r["wrappers"]) == 1 for r in rep["ranks"]), rep["ranks"]
    assert [f["message"] for f in findings(rep, "DD511")] == []  # alive, not "gone"
    assert [f["message"] for f in findings(rep, "DD510")] == [
        f"rank 1 in broadcast at hang.py:{line_of('hang.py', 'LINE_ODD_BROADCAST')} while 1 ranks wait in "
        f"all_reduce at hang.py:{line_of('hang.py', 'LINE_WAIT')}"]
    job = next(j for j in rep["jobs"] if j["chosen"])  # other jobs of this machine are listed too
    assert [(a["pid"], a["kind"], a["ranks"]) for a in job["agents"]] == [(j.proc.pid, "torchrun", [0, 1])]


def test_mp_spawn_ranks_are_numbered_by_start_order_and_match_the_real_ranks(launch):
    j = launch([sys.executable, str(JOBS / "spawn_job.py"), "3", str(free_port())], {"SPAWN_ODD": "1"}, "spawn")
    real = {int(m.group(2)): int(m.group(1)) for m in j.wait_for(r"ready (\d) pid (\d+)", 3)}
    rc, rep = inspect("--pid", str(j.proc.pid))
    assert rc == 1
    assert {r["pid"]: r["rank"] for r in rep["ranks"]} == real  # the guess is right
    assert {r["launcher"] for r in rep["ranks"]} == {"mp.spawn"} and {r["rank_from"] for r in rep["ranks"]} == {
        "spawn order (guess)"}
    job = next(j for j in rep["jobs"] if j["chosen"])  # other jobs of this machine are listed too
    assert any("not in the environment" in n for n in job["notes"])
    assert [f["message"] for f in findings(rep, "DD510")] == [
        f"rank 1 in broadcast at spawn_job.py:{line_of('spawn_job.py', 'LINE_SPAWN_ODD')} while 2 ranks wait in "
        f"all_reduce at spawn_job.py:{line_of('spawn_job.py', 'LINE_SPAWN_WAIT')}"]


def test_an_elastic_restart_is_judged_on_the_new_generation(launch):
    j = launch(torchrun("--nproc-per-node=2", "--max-restarts=1", "--monitor-interval=0.5", str(JOBS / "restart_job.py")),
               {}, "restart")
    gen1 = {int(m.group(2)) for m in j.wait_for(r"ready (\d) gen 1 pid (\d+)", 2)}
    old = {int(m.group(1)) for m in re.finditer(r"ready \d gen 0 pid (\d+)", j.log.read_text())}
    rc, rep = inspect("--pid", str(j.proc.pid))
    assert rc == 1
    assert {r["pid"] for r in rep["ranks"]} == gen1 and not gen1 & old
    assert {r["generation"] for r in rep["ranks"]} == {1}
    job = next(j for j in rep["jobs"] if j["chosen"])  # other jobs of this machine are listed too
    assert job["agents"][0]["restarts"] == 1 and any("restarted 1 time" in n for n in job["notes"])
    assert findings(rep, "DD511") == [] and len(findings(rep, "DD510")) == 1


@pytest.mark.skipif(shutil.which("mpirun") is None and os.environ.get("DDPDOCTOR_REQUIRE_LAB") != "1",
                    reason="Open MPI's mpirun not installed (apt install openmpi-bin)")
def test_mpirun_ranks_come_from_open_mpis_variables(launch):
    port = free_port()
    j = launch(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "MASTER_ADDR=127.0.0.1",
                "-x", f"MASTER_PORT={port}", "-x", "HANG_MODE=other", "-x", "HANG_RANK=1", "-x", "OMP_NUM_THREADS=1",
                "-x", "PYTHONPATH", sys.executable, str(JOBS / "hang.py")], {}, "mpirun")
    j.wait_for(r"ready \d", 2)
    rc, rep = inspect("--pid", str(j.proc.pid))
    assert rc == 1
    assert sorted((r["rank"], r["launcher"], r["rank_from"]) for r in rep["ranks"]) == [
        (0, "mpirun", "OMPI_COMM_WORLD_RANK"), (1, "mpirun", "OMPI_COMM_WORLD_RANK")]
    assert len(findings(rep, "DD510")) == 1


DRIVER = r'''
import json, os, signal, subprocess, sys, time
hang, env = sys.argv[1], dict(os.environ, OMP_NUM_THREADS="1")
def start(n, mode, log):
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", hang],
                            env=dict(env, HANG_MODE=mode, HANG_RANK="1"), stdout=open(log, "w"), stderr=subprocess.STDOUT)
a, b = start(2, "other", "a.log"), start(1, "idle", "b.log")
end = time.monotonic() + 120
while (open("a.log").read().count("ready") < 2 or open("b.log").read().count("ready") < 1) and time.monotonic() < end:
    time.sleep(0.3)
time.sleep(1)
out = {}
for args in (["--json"], []):
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", *args], capture_output=True, text=True, timeout=60)
    out["json" if args else "text"] = p.stdout
    out["rc"] = p.returncode
print(json.dumps({**out, "a": a.pid, "b": b.pid}))
'''


def test_two_jobs_on_one_node_the_larger_is_judged_and_the_other_named(tmp_path):
    """In a pid namespace of its own (no other job of this machine in view), as on a node running two jobs."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare not installed")
    p = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", DRIVER, str(JOBS / "hang.py")],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                       env={**os.environ, "PYTHONPATH": str(ROOT)})  # pid 1 of the namespace exits: all killed
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    rep = json.loads(out["json"])
    assert len(rep["jobs"]) == 2 and [len(j["ranks"]) for j in rep["jobs"]] == [2, 1]
    assert [j["chosen"] for j in rep["jobs"]] == [True, False]
    assert rep["chosen"].startswith("the largest of 2 jobs on this node (2 ranks)")
    assert len(rep["ranks"]) == 2 and len(findings(rep, "DD510")) == 1
    other = rep["jobs"][1]
    assert f"  also: job {other['job']}, 1 rank(s) started by torchrun pid {out['b']}" in out["text"], out["text"]


def _launcher_python(module: str) -> str:
    """A Python that has `module` (accelerate, deepspeed): this one, or DDPDOCTOR_LAUNCHER_PYTHON (a venv made
    with --system-site-packages, `DS_BUILD_OPS=0 pip install --no-build-isolation accelerate deepspeed`)."""
    for py in (os.environ.get("DDPDOCTOR_LAUNCHER_PYTHON"), sys.executable):
        if py and subprocess.run([py, "-c", f"import {module}"], capture_output=True, timeout=60).returncode == 0:
            return py
    why = f"{module} not installed (set DDPDOCTOR_LAUNCHER_PYTHON to a Python that has it; scripts/test.sh makes one)"
    if os.environ.get("DDPDOCTOR_REQUIRE_LAB") == "1":
        pytest.fail(why, pytrace=False)  # CI: a skipped launcher case is a hole
    pytest.skip(why)


def test_accelerate_launch_is_the_agent_and_its_workers_the_ranks(launch):
    py = _launcher_python("accelerate")
    # accelerate's multi_gpu_launcher runs torch.distributed.run's agent inside `accelerate launch` itself
    j = launch([py, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
                str(JOBS / "hang.py")], {"HANG_MODE": "other", "HANG_RANK": "1"}, "accelerate")
    j.wait_for(r"ready \d", 2)
    rc, rep = inspect("--pid", str(j.proc.pid))
    job = next(x for x in rep["jobs"] if x["chosen"])
    assert rc == 1 and job["launcher"] == "accelerate"
    assert [(a["pid"], a["kind"], a["ranks"]) for a in job["agents"]] == [(j.proc.pid, "accelerate", [0, 1])]
    assert all("accelerate" not in r["cmdline"] for r in rep["ranks"]) and len(findings(rep, "DD510")) == 1


def test_deepspeed_launch_is_the_agent_and_its_workers_the_ranks(launch):
    import base64
    py = _launcher_python("deepspeed")
    world = base64.urlsafe_b64encode(json.dumps({"localhost": [0, 1]}).encode()).decode()
    # what the `deepspeed` runner starts on each node (deepspeed/launcher/runner.py -> launch.py)
    j = launch([py, "-u", "-m", "deepspeed.launcher.launch", f"--world_info={world}", "--master_addr=127.0.0.1",
                f"--master_port={free_port()}", "--no_local_rank", str(JOBS / "hang.py")],
               {"HANG_MODE": "other", "HANG_RANK": "1"}, "deepspeed")
    j.wait_for(r"ready \d", 2)
    rc, rep = inspect("--pid", str(j.proc.pid))
    job = next(x for x in rep["jobs"] if x["chosen"])
    assert rc == 1 and job["launcher"] == "deepspeed"
    assert [(a["pid"], a["kind"], a["ranks"]) for a in job["agents"]] == [(j.proc.pid, "deepspeed", [0, 1])]
    assert len(findings(rep, "DD510")) == 1
