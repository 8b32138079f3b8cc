"""`ddpdoctor watch` beside REAL torchrun + Gloo training loops, faults injected mid-run.

Every test checks two things: nothing is reported while the job is healthy, and after the fault the
right rank is named, with what it does and where, within the goal (15 s for a hang; the straggler's
60 s at +10 % is measured by benchmarks/bench_watch.py over several seeds). The job is only looked at:
it must finish (or be killed by the test) exactly as it would without watch.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from watchlab import DATA, CpuCap, TrainJob, Watch, cgroup_v1_cpu, killed_after, line_of

pytest.importorskip("torch")
pytestmark = pytest.mark.lab  # real torchrun jobs: slow, deselected by -m "not lab"
HANG_GOAL_S = 15.0


@pytest.fixture
def job(tmp_path):
    with killed_after(lambda **kw: TrainJob(tmp_path, **kw)) as start:
        yield start


def only(w: Watch, *kinds):
    return [e for e in w.events if e["kind"] in kinds]


def test_healthy_then_a_rank_sleeping_in_user_code_is_named_within_15s(job):
    j = job(nproc=2, seconds=120)
    j.wait_ready()
    w = Watch("--pid", str(j.proc.pid))
    try:
        time.sleep(20)  # healthy: nothing to say
        assert w.events == [], w.events
        t = j.fault("sleep:1")
        e = w.wait_for("hang", HANG_GOAL_S + 5, after=t)
        assert e is not None, (w.events, j.log.read_text()[-2000:])
        assert e["at"] - t <= HANG_GOAL_S
        assert e["ranks"] == [1] and "user code" in e["detail"]
        (x,) = e["where"]
        assert x["pid"] == j.rank_pid(1) and (x["where"]["file"], x["where"]["line"]) == ("train.py", line_of("LINE_SLEEP"))
        assert e["waiting"] == {"ranks": [0], "call": "all_reduce", "at": f"train.py:{line_of('LINE_ALLREDUCE')}"}
        assert j.proc.poll() is None  # watch never touched the job
    finally:
        rc = w.stop()
    assert rc == 1 and w.events[-1]["kind"] == "summary" and w.events[-1]["open"] == ["hang"]


def test_a_stopped_rank_then_its_recovery_then_its_death_by_sigkill(job):
    j = job(nproc=2, seconds=120)
    j.wait_ready()
    w = Watch("--pid", str(j.proc.pid))
    try:
        time.sleep(6)
        pid = j.rank_pid(1)
        t = time.monotonic()
        os.kill(pid, signal.SIGSTOP)  # the test stops it; watch only reports it
        e = w.wait_for("hang", HANG_GOAL_S + 5, after=t)
        assert e is not None, w.events
        assert e["at"] - t <= HANG_GOAL_S and e["ranks"] == [1] and e["detail"].startswith("stopped")
        os.kill(pid, signal.SIGCONT)
        assert w.wait_for("recovered", 20, after=e["at"]) is not None, w.events
        time.sleep(3)
        os.kill(pid, signal.SIGKILL)
        assert w.finish(60) == 1  # the job ends (torchrun stops the others), so does watch
    finally:
        w.stop()
    gone = {e["ranks"][0]: e["detail"] for e in only(w, "rank_gone")}
    assert gone[1] == "killed by SIGKILL", gone
    assert w.events[-1]["kind"] == "summary" and w.events[-1]["end"] == "job ended"


def test_a_rank_in_a_different_collective_is_named_not_the_ones_waiting(job):
    j = job(nproc=3, seconds=120)
    j.wait_ready()
    w = Watch("--pid", str(j.proc.pid))
    try:
        time.sleep(6)
        t = j.fault("other:2")
        e = w.wait_for("hang", HANG_GOAL_S + 5, after=t)
        assert e is not None, w.events
        assert e["at"] - t <= HANG_GOAL_S
        assert e["ranks"] == [2] and e["detail"] == "in a different collective"
        assert e["where"][0]["where"]["call"] == "broadcast" and e["where"][0]["where"]["line"] == line_of("LINE_OTHER")
        assert e["waiting"]["ranks"] == [0, 1] and e["waiting"]["call"] == "all_reduce"
    finally:
        w.stop()


def test_a_rank_stuck_in_its_dataloader_worker_names_the_worker_line(job):
    j = job(nproc=2, seconds=120)
    j.wait_ready()
    w = Watch("--pid", str(j.proc.pid))
    try:
        time.sleep(6)
        t = j.fault("loader:0")
        # the worker had prefetched 4 batches (prefetch_factor=4): the main thread runs dry ~4 steps later
        e = w.wait_for("hang", HANG_GOAL_S + 10, after=t)
        assert e is not None, w.events
        assert e["ranks"] == [0] and "DataLoader worker" in e["detail"]
        assert f"data.py:{line_of('LINE_LOADER', DATA)}" in e["detail"]
        assert e["waiting"]["ranks"] == [1]
        assert "all_reduce" == e["waiting"]["call"]
    finally:
        w.stop()


STRAGGLER_GOAL_S = 60.0   # the goal, measured over seeds by benchmarks/bench_watch.py faults
STRAGGLER_BOUND_S = 80.0  # what a test asserts: the goal plus room for a loaded CI machine (a regression
                          # to the old ~70 s confirmation plus a window would still fail it)


def test_a_rank_computing_longer_every_step_is_named_a_straggler_with_its_line(job):
    """`lag:1:0.3`: rank 1 computes 30 % of the healthy step longer every step (matmuls for that long).
    The fault this replaced, 1.6x the matmuls of augment_batch, is +4-12 % of the step depending on the
    machine's load (its matmuls are a small part of a step on a quiet machine): at or under the 10 %
    the straggler rule needs, so it was missed on a quiet machine (benchmarks: slow1.6)."""
    j = job(nproc=2, seconds=150)
    j.wait_ready()
    w = Watch("--pid", str(j.proc.pid))
    try:
        time.sleep(15)  # watch's lag windows fill (20 s); the verdict needs 40 s of lagging after that
        t = j.fault("lag:1:0.3")
        e = w.wait_for("straggler", STRAGGLER_BOUND_S + 3, after=t)
        assert e is not None, (w.events, j.log.read_text()[-1500:])
        print(f"named in {e['at'] - t:.1f} s: {e['detail']}")
        assert e["ranks"] == [1] and e["ratio"] >= 1.1 and e["lag"] >= 0.1, e
        assert e["at"] - t <= STRAGGLER_BOUND_S, e
        # the line is a hint: under CPU contention the blocked "device" line can outweigh the lag's line
        # (seen on the loaded lab machine); the unit test pins the attribution on clean data
        assert e["extra_where"].split(" ")[1].split(":")[0] in ("data.py", "train.py"), e  # the job's own code
        assert [x["kind"] for x in w.events] == ["straggler"], w.events  # nothing before it
    finally:
        w.stop()


def _cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not cgroup_v1_cpu(), reason="needs root and cgroup v1 cpu (cpu.cfs_quota_us)")
def test_a_rank_capped_to_half_its_cpu_is_named_a_straggler_throttled_by_its_cap(job):
    j = job(nproc=2, seconds=150)
    j.wait_ready()
    w = Watch("--pid", str(j.proc.pid))
    cap = None
    try:
        pid = j.rank_pid(0)
        c0 = _cpu_s(pid)
        time.sleep(15)  # watch's lag windows fill (20 s); its cgroup's throttled time names it (capjudge.py)
        used = (_cpu_s(pid) - c0) / 15  # what it gets on this machine now, whatever the load
        t = time.monotonic()
        cap = CpuCap(pid, max(0.03, used / 2))
        e = w.wait_for("straggler", STRAGGLER_BOUND_S + 3, after=t)
        assert e is not None, (used, w.events)
        print(f"named in {e['at'] - t:.1f} s: {e['detail']}; {e['cause']}")
        assert e["ranks"] == [0] and e["at"] - t <= STRAGGLER_BOUND_S, e
        assert e["cause"].startswith("throttled by its CPU quota: ") and cap.dir.name in e["cause"], e
        # the quota as set, and the command that lifts it (this cgroup is set by hand: no Slurm/docker/k8s path)
        assert "of period 100 ms" in e["cause"] and f"echo -1 > {cap.dir}/cpu.cfs_quota_us" in e["cause"], e
        assert [x["kind"] for x in w.events] == ["straggler"], w.events
    finally:
        if cap:
            cap.close()
        w.stop()


def test_run_watch_launches_the_job_and_watches_it_to_its_end(tmp_path):
    import shutil
    import subprocess
    import sys

    from watchlab import JOB, ROOT
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAIN_SECONDS": "12", "OMP_NUM_THREADS": "1",
           "FAULT_FILE": str(tmp_path / "none")}
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "run", "--watch", "--no-network", "--", torchrun,
                        "--standalone", "--nproc-per-node=2", str(JOB)], capture_output=True, text=True,
                       timeout=180, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("done ") == 2  # the job's own output is untouched
    summary = [ln for ln in p.stderr.splitlines() if " summary: " in ln]
    assert len(summary) == 1 and "(job ended): no events" in summary[0], p.stderr[-3000:]
