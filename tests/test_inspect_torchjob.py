"""`ddpdoctor inspect` on REAL torchrun + Gloo jobs (CPU) that hang in known places.

Each job runs in a session of its own (torchrun's workers start sessions of their own too: they
are killed by process group and session, and the test asserts nothing is left). The job must be
left exactly as it was: same pids, none stopped, and a progressing job still completes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_port

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "inspect_jobs" / "hang.py"
SRC = JOB.read_text().splitlines()


def line_of(marker: str) -> int:
    return next(i + 1 for i, s in enumerate(SRC) if s.rstrip().endswith(f"# {marker}"))


def _tree(root: int) -> set[int]:
    import psutil
    try:
        return {root} | {c.pid for c in psutil.Process(root).children(recursive=True)}
    except psutil.Error:
        return set()


def _workers(root: int) -> dict[int, str]:
    import psutil
    out = {}
    for pid in _tree(root):
        try:
            p = psutil.Process(pid)
            if "hang.py" in " ".join(p.cmdline()) and "torchrun" not in " ".join(p.cmdline()):
                out[pid] = p.status()
        except psutil.Error:
            pass
    return out


class Job:
    def __init__(self, tmp: Path, nproc: int, mode: str, odd: int = 1, steps: int = 3, env: dict | None = None):
        self.log = tmp / f"job-{mode}.log"
        env = {**os.environ, "HANG_MODE": mode, "HANG_RANK": str(odd), "HANG_STEPS": str(steps),
               "OMP_NUM_THREADS": "1", **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      f"--nproc-per-node={nproc}", str(JOB)], env=env, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.nproc = nproc
        self.pids: set[int] = set()

    def wait_ready(self, timeout=90.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.log.read_text().count("ready ") >= self.nproc:
                time.sleep(0.5)  # let the odd one reach its line
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise AssertionError(f"job did not get ready:\n{self.log.read_text()[-2000:]}")

    def kill(self):
        pids = self.pids | _tree(self.proc.pid)
        for pid in pids:
            for fn in (os.killpg, ):
                try:
                    fn(os.getpgid(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.proc.kill()
        self.proc.wait(10)
        end = time.monotonic() + 10
        while time.monotonic() < end and any(os.path.exists(f"/proc/{p}") and _state(p) != "Z" for p in pids):
            time.sleep(0.1)
        left = [p for p in pids if os.path.exists(f"/proc/{p}") and _state(p) != "Z"]
        assert not left, f"left running: {left}"


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.fixture
def job(tmp_path):
    jobs = []

    def start(*a, **kw):
        j = Job(tmp_path, *a, **kw)
        jobs.append(j)
        return j
    yield start
    for j in jobs:
        j.kill()


def inspect(*args, timeout=60):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--json", *args], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def findings(report, check_id):
    return [f for r in report["results"] if r["id"] == check_id for f in r["findings"]]


def _unchanged(before: dict[int, str], root: int):
    after = _workers(root)
    assert set(after) == set(before), "the job's processes changed"
    assert all(s != "stopped" for s in after.values()), after


def test_names_the_rank_in_a_different_collective_with_its_line(job):
    j = job(3, "other", odd=2)
    j.wait_ready()
    before = _workers(j.proc.pid)
    j.pids = set(before)
    rc, rep = inspect("--pid", str(j.proc.pid))
    assert rc == 1
    (f,) = findings(rep, "DD510")
    assert f["message"] == (f"rank 2 in broadcast at hang.py:{line_of('LINE_ODD_BROADCAST')} while 2 ranks wait in "
                            f"all_reduce at hang.py:{line_of('LINE_WAIT')}")
    assert len(rep["ranks"]) == 3
    _unchanged(before, j.proc.pid)


def test_names_the_sleeping_rank_that_is_in_no_collective(job):
    j = job(3, "sleep", odd=0)
    j.wait_ready()
    before = _workers(j.proc.pid)
    j.pids = set(before)
    rc, rep = inspect("--pid", str(j.proc.pid))
    assert rc == 1
    (f,) = findings(rep, "DD512")
    assert f["message"].startswith(f"rank 0 in <module> at hang.py:{line_of('LINE_ODD_SLEEP')} (not in a collective)")
    assert f"all_reduce at hang.py:{line_of('LINE_WAIT')}" in f["message"]
    assert not findings(rep, "DD510")
    _unchanged(before, j.proc.pid)


def test_a_stopped_rank_is_named(job):
    j = job(2, "other", odd=1)
    j.wait_ready()
    before = _workers(j.proc.pid)
    j.pids = set(before)
    rank1 = next(p for p in before if "RANK=1" in open(f"/proc/{p}/environ").read().split("\0"))
    os.kill(rank1, signal.SIGSTOP)  # the test stops it; inspect must only report it
    try:
        rc, rep = inspect("--pid", str(j.proc.pid))
        assert rc == 1
        assert [f["message"] for f in findings(rep, "DD511")] == [f"rank 1 (pid {rank1}) is stopped (state T)"]
    finally:
        os.kill(rank1, signal.SIGCONT)


def test_a_progressing_job_exits_0_and_still_completes(job):
    j = job(2, "progress", odd=9, steps=400)
    end = time.monotonic() + 90
    while len(_workers(j.proc.pid)) < 2:
        assert time.monotonic() < end and j.proc.poll() is None, j.log.read_text()[-2000:]
        time.sleep(0.3)
    time.sleep(5)  # past init, inside the 400-step loop (about 20 s)
    assert "ready" not in j.log.read_text()
    before = _workers(j.proc.pid)
    j.pids = set(before)
    rc, rep = inspect("--pid", str(min(before)))
    assert j.proc.poll() is None or j.proc.returncode == 0
    assert rc == 0, json.dumps([r for r in rep["results"] if r["findings"]], indent=1)
    assert j.proc.wait(120) == 0, j.log.read_text()[-2000:]


def test_no_job_is_one_line_and_exit_2():
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--pid", "1"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr


FR_FIXTURES = ROOT / "tests" / "flightrec"


def test_an_armed_jobs_dumps_and_a_watchdog_log_are_read(job, tmp_path):
    # the job is armed the way `ddpdoctor arm` does it; Gloo writes no dump on its own (torch's dump on
    # timeout is the NCCL watchdog's), so the real Gloo dumps of tests/flightrec/gloo-barrier-mismatch
    # (rank 2 called barrier at #4) are put where the job's TORCH_FR_DUMP_TEMP_FILE says torch would write
    import shutil
    fr = tmp_path / "fr"
    fr.mkdir()
    j = job(2, "other", odd=1, env={"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": f"{fr}/fr_rank"})
    j.wait_ready()
    j.pids = set(_workers(j.proc.pid))
    rc, rep = inspect("--pid", str(j.proc.pid), "--select", "DD516")
    (res,) = rep["results"]
    assert (rc, res["status"]) == (0, "skip") and res["reason"].startswith(f"no dump in {fr} yet")
    # a Gloo job never dumps on a timeout: the reason must not promise one, and must say what gives evidence
    assert "Gloo jobs never do" in res["reason"] and "--debug-server" in res["reason"]
    for f in (FR_FIXTURES / "gloo-barrier-mismatch").glob("fr_rank*"):
        shutil.copy(f, fr / f.name)
    rc, rep = inspect("--pid", str(j.proc.pid), "--log", str(FR_FIXTURES / "nccl-fr-timeout" / "job.log"))
    assert rc == 1
    assert [f["message"] for f in findings(rep, "DD516")] == [
        "flight recorder: at collective #4 (all_reduce) of pg 0 (default_pg) rank 2 called barrier while ranks 0,1,3 called all_reduce"]
    assert rep["flightrec"]["dir"] == str(fr)
    assert [f["message"] for f in findings(rep, "DD517")] == [
        "watchdog: collective #5 (ALLREDUCE) of pg 0 (default_pg) timed out on rank 0, every rank in the log had entered it"]
    assert findings(rep, "DD510")  # the stacks still name the odd rank of the running job


def test_pid_of_a_rank_picks_its_job_and_a_bad_log_is_one_line_exit_2(job, tmp_path):
    j = job(2, "other", odd=1)
    j.wait_ready()
    before = _workers(j.proc.pid)
    j.pids = set(before)
    ranks = sorted(p for p in before if any(v.startswith("RANK=") for v in open(f"/proc/{p}/environ").read().split("\0")))
    assert len(ranks) == 2
    rc, rep = inspect("--pid", str(ranks[-1]))  # a rank, not the launcher
    assert rc == 1 and sorted(r["pid"] for r in rep["ranks"]) == ranks
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--log", str(tmp_path / "nope.log")],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [f"ddpdoctor: error: --log {tmp_path / 'nope.log'}: not a readable file"]


def test_without_ptrace_rights_it_says_how_to_grant_them(tmp_path):
    # a "rank" of another user (nobody), inspected by root without CAP_SYS_PTRACE: the kernel refuses
    # py-spy's process_vm_readv (no Yama on this machine, so a same-user refusal cannot be staged: the
    # other user stands for it)
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1"}
    try:
        rank = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                                 "import time; time.sleep(120)"], env=env, cwd="/", start_new_session=True)
    except FileNotFoundError:
        pytest.skip("setpriv not installed")
    try:
        time.sleep(0.5)
        p = subprocess.run(["setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace", sys.executable,
                            "-m", "ddpdoctor", "inspect", "--pid", str(rank.pid)], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
        # the stacks are refused (exit 1: the job cannot be judged), or already its environ (exit 2)
        assert p.returncode in (1, 2) and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "ptrace" in p.stderr and "CAP_SYS_PTRACE" in p.stderr, p.stderr
    finally:
        rank.kill()
        rank.wait(10)


def test_debug_server_live_flight_recorder_names_the_odd_rank(job):
    """A job that called torch.distributed.debug.start_debug_server(): `--debug-server` reads every
    rank's live flight-recorder buffer (no dump written yet, no timeout waited for) and DD516 names
    rank 1, which called broadcast where rank 0 called all_reduce. The job keeps running unchanged."""
    port = free_port()
    j = job(2, "other", env={"HANG_DEBUG_SERVER": str(port), "TORCH_FR_BUFFER_SIZE": "2000"})
    j.wait_ready()
    before = _workers(j.proc.pid)
    rc, rep, imported = _inspect_imports("--pid", str(j.proc.pid), "--debug-server")
    (f,) = findings(rep, "DD516")
    assert rc == 1
    assert f["message"].startswith("flight recorder: at collective #4 (all_reduce) of pg 0"), f
    assert "rank 1 called broadcast" in f["message"], f
    assert f["evidence"]["dir"] == "debug server"  # one node: every URL from /proc, the store not read
    assert "torch" not in imported  # no store client to load: inspect stays torch-free
    _unchanged(before, j.proc.pid)


def _inspect_imports(*args):
    """inspect --json under `python -X importtime`: (rc, report, the top-level packages it imported)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddpdoctor", "inspect", "--json", *args],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    imported = {ln.rsplit("|", 1)[1].strip().split(".")[0] for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    return p.returncode, json.loads(p.stdout), imported


def test_debug_server_asked_of_a_job_without_one_says_what_was_looked_for_and_the_stacks_still_judge(job):
    """--debug-server on a job that never called start_debug_server(): DD516 warns in one line — no rank has
    the server's pt_workerserver thread, and the line that starts it — while the stacks still name rank 1
    (DD510); the exit code is the stacks' verdict (degraded evidence is not bad input), and torch is not loaded."""
    j = job(2, "other")
    j.wait_ready()
    rc, rep, imported = _inspect_imports("--pid", str(j.proc.pid), "--debug-server")
    assert rc == 1 and findings(rep, "DD510"), rep
    (f,) = findings(rep, "DD516")
    assert f["severity"] == "warning", f
    assert sorted(r["pid"] for r in rep["ranks"]) == sorted(p for p in _workers(j.proc.pid) if p != j.proc.pid)
    looked = ", ".join(f"{r['rank']} (pid {r['pid']})" for r in sorted(rep["ranks"], key=lambda r: r["rank"]))
    assert f["message"] == ("flight recorder: the debug server gave nothing to read: no rank runs torch's debug "
                            f"server: no thread named pt_workerserver in rank {looked}"), f
    assert "start_debug_server()" in f["fix"]["summary"] and "tabulate" in f["fix"]["summary"], f
    assert "torch" not in imported


def test_debug_server_stacks_stand_in_where_ptrace_is_denied(job, tmp_path):
    """Where py-spy may not attach (Yama's ptrace_scope=1 on Ubuntu: same user, not a descendant;
    this machine has no Yama to stage it), `--debug-server` reads each rank's stack from torch's
    debug server (faulthandler's traceback, no ptrace) and still names the odd rank with its line.
    The refusal is the one boundary faked: a py-spy stand-in (DDPDOCTOR_PYSPY) that prints py-spy's
    permission error; the job, its debug server and the stacks are real."""
    port = free_port()
    denied = tmp_path / "py-spy"
    denied.write_text("#!/bin/sh\necho \"Error: Permission Denied: Try running again with elevated permissions\" >&2\n"
                      "exit 1\n")
    denied.chmod(0o755)
    j = job(3, "other", odd=2, env={"HANG_DEBUG_SERVER": str(port)})
    j.wait_ready()
    before = _workers(j.proc.pid)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DDPDOCTOR_PYSPY": str(denied)}
    plain = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--pid", str(j.proc.pid)],
                           capture_output=True, text=True, timeout=60, env=env)
    assert plain.returncode == 1 and "ptrace" in plain.stderr, plain.stderr  # without it: the grant-rights line
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--json", "--pid", str(j.proc.pid),
                        "--debug-server"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 1, p.stderr
    rep = json.loads(p.stdout)
    (f,) = findings(rep, "DD510")
    assert f["message"] == (f"rank 2 in broadcast at hang.py:{line_of('LINE_ODD_BROADCAST')} while 2 ranks wait in "
                            f"all_reduce at hang.py:{line_of('LINE_WAIT')}")
    assert all(s.get("source") == "debug server" for r in rep["ranks"] for s in r["samples"])
    _unchanged(before, j.proc.pid)
