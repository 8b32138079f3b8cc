"""Helpers for `ddpdoctor watch`'s tests on REAL torchrun + Gloo jobs (tests/watch_jobs/train.py, data.py).

A job runs in a session of its own; faults are injected from outside it (SIGSTOP, SIGKILL, a cgroup v1
CPU cap) or by writing its FAULT_FILE (the job then sleeps, calls another collective, or its
DataLoader worker sleeps). `Watch` runs `ddpdoctor watch --json` beside it and timestamps each event
line as it arrives, so a test measures the time from injection to verdict.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "watch_jobs" / "train.py"
DATA = JOB.parent / "data.py"  # what train.py and ddp_train.py share: the DataLoader's Data, augment_batch
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")


def line_of(marker: str, src: Path = JOB) -> int:
    return next(i + 1 for i, s in enumerate(src.read_text().splitlines()) if s.rstrip().endswith(f"# {marker}"))


@contextlib.contextmanager
def killed_after(make):
    """`start(**kw)` -> make(**kw), every job it started killed at the end: the body of each watch lab test's
    `job` fixture (`with killed_after(lambda **kw: TrainJob(tmp_path, **kw)) as start: yield start`)."""
    jobs = []

    def start(**kw):
        jobs.append(make(**kw))
        return jobs[-1]
    try:
        yield start
    finally:
        for j in jobs:
            j.kill()


def fake_libcuda(tmp_path_factory) -> Path:
    """tests/gpu_jobs/fake_libcuda.c built as a libcuda.so.1 (it spins in cuStreamSynchronize as the driver
    does): the one boundary this machine cannot provide, for watch's GPU-wait tests."""
    import pytest
    if not shutil.which("gcc"):
        pytest.skip("gcc is needed to build the stand-in libcuda.so.1")
    out = tmp_path_factory.mktemp("fakecuda") / "libcuda.so.1"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(out), str(ROOT / "tests" / "gpu_jobs" / "fake_libcuda.c")],
                   check=True, timeout=120)
    return out


def tree(root: int) -> set[int]:
    import psutil
    try:
        return {root} | {c.pid for c in psutil.Process(root).children(recursive=True)}
    except psutil.Error:
        return set()


class TrainJob:
    def __init__(self, tmp: Path, nproc: int = 2, seconds: float = 60, env: dict | None = None, job: Path = JOB):
        self.fault_file = tmp / "fault"
        self.log = tmp / "job.log"
        env = {**os.environ, "FAULT_FILE": str(self.fault_file), "TRAIN_SECONDS": str(seconds),
               "OMP_NUM_THREADS": "1", **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      f"--nproc-per-node={nproc}", str(job)], env=env, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.nproc = nproc
        self.seen: set[int] = set()

    def wait_ready(self, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.seen |= tree(self.proc.pid)
            if self.log.read_text().count("ready ") >= self.nproc:
                return
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.3)
        raise AssertionError(f"job did not get ready:\n{self.log.read_text()[-3000:]}")

    def rank_pid(self, rank: int) -> int:
        for pid in tree(self.proc.pid):
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if f"RANK={rank}".encode() in env and b"train.py" in cmd and b"torch.distributed.run" not in cmd:
                if os.getppid() != pid and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1] == str(self.proc.pid):
                    return pid
        raise AssertionError(f"rank {rank} not found")

    def fault(self, spec: str) -> float:
        tmp = self.fault_file.with_suffix(".tmp")
        tmp.write_text(spec)
        os.replace(tmp, self.fault_file)  # the job never reads half a spec
        return time.monotonic()

    def kill(self) -> None:
        pids = self.seen | tree(self.proc.pid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait(15)
        end = time.monotonic() + 10
        while time.monotonic() < end and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not [p for p in pids if _alive(p)], "left running"


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Watch:
    """`ddpdoctor watch --json ARGS` in the background; `events` grows as lines arrive (with `at`)."""

    def __init__(self, *args: str, argv_prefix: list[str] | None = None, env: dict | None = None):
        argv = (argv_prefix or [sys.executable, "-m", "ddpdoctor"]) + ["watch", "--json", *args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        self.events: list[dict] = []
        self.stderr = ""
        self._th = threading.Thread(target=self._read, daemon=True)
        self._th.start()

    def _read(self):
        for ln in self.proc.stdout:
            e = json.loads(ln)
            e["at"] = time.monotonic()
            self.events.append(e)

    def wait_for(self, kind: str, timeout: float, after: float = 0.0) -> dict | None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for e in self.events:
                if e["kind"] == kind and e["at"] >= after:
                    return e
            if self.proc.poll() is not None and not self._th.is_alive():
                break
            time.sleep(0.2)
        return None

    def finish(self, timeout: float = 60) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)
            rc = self.proc.wait(15)
        self._th.join(5)
        self.stderr = self.proc.stderr.read()
        return rc

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.finish(20)


class CpuCap:
    """A cgroup v1 CPU cap on one process (cpu.cfs_quota_us over cpu.cfs_period_us), removed on exit."""

    def __init__(self, pid: int, share: float):
        self.dir = CGROUP_CPU / f"ddpdoctor-watch-{os.getpid()}-{pid}"
        self.dir.mkdir()
        (self.dir / "cpu.cfs_period_us").write_text("100000")
        (self.dir / "cpu.cfs_quota_us").write_text(str(int(100000 * share)))
        (self.dir / "cgroup.procs").write_text(str(pid))

    def close(self):
        try:
            for pid in (self.dir / "cgroup.procs").read_text().split():
                try:
                    (CGROUP_CPU / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
            self.dir.rmdir()
        except OSError:
            pass


HOG = """import sys, time
duty = float(sys.argv[1])
while True:
    end = time.monotonic() + 0.1 * duty
    while time.monotonic() < end:
        pass
    if duty < 1:
        time.sleep(0.1 * (1 - duty))
"""


def threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def cpu_of(pid: int) -> int:
    """The CPU the process's main thread last ran on (proc(5) stat field 39, "processor")."""
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[36])


class BusyCore:
    """A busy core for one rank: a CPU hog (a process that spins `duty` of every 100 ms, at `nice`) pinned to one CPU,
    and with `pin` the rank's every thread pinned there too (taskset -a -p, as a cpuset or Slurm's
    --cpu-bind does); without it the rank may move, the hog stays on the CPU the rank ran on. Undone by close()."""

    def __init__(self, pid: int, duty: float = 1.0, pin: bool = True, cpu: int | None = None, nice: int = 0):
        self.pid, self.pinned = pid, pin
        self.cpu = cpu_of(pid) if cpu is None else cpu
        self.hog = subprocess.Popen([sys.executable, "-c", HOG, str(duty)], start_new_session=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.sched_setaffinity(self.hog.pid, {self.cpu})
        # With sched autogroup (/proc/sys/kernel/sched_autogroup_enabled, on here) each session is a group
        # that shares a CPU fairly with the others, whatever its tasks' nice: torchrun starts every rank in a
        # session of its own, and so is the hog. Its group's nice (/proc/<pid>/autogroup, sched(7)) is what
        # weighs: a nice below 0 is a hog at a higher priority. At the default weight on a machine already
        # loaded, the load balancer moves the other cores' tasks away from the busy one and the bound rank
        # is slowed no more than any other (measured: docs/watch.md "A busy core").
        try:
            with open(f"/proc/{self.hog.pid}/autogroup", "w") as f:
                f.write(str(nice))
        except OSError:   # no autogroup (CONFIG_SCHED_AUTOGROUP off): the process's own nice weighs
            os.setpriority(os.PRIO_PROCESS, self.hog.pid, nice)
        if pin:
            for tid in threads(pid):
                try:
                    os.sched_setaffinity(tid, {self.cpu})
                except OSError:
                    pass

    def close(self):
        if self.pinned:
            for tid in threads(self.pid):
                try:
                    os.sched_setaffinity(tid, range(os.cpu_count() or 1))
                except OSError:
                    pass
        self.hog.kill()
        self.hog.wait(10)


def cgroup_v1_cpu() -> bool:
    return (CGROUP_CPU / "cpu.cfs_quota_us").exists() and os.geteuid() == 0


def srun_python(port: int) -> str:
    """`srun ... sh -c WRAP python train.py`: one rank per task, its rank from SLURM_PROCID."""
    return ('export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS LOCAL_WORLD_SIZE=1 '
            f'MASTER_ADDR=node1 MASTER_PORT={port} OMP_NUM_THREADS=1; exec "$0" "$@"')


def srun_torchrun(port: int, nnodes: int) -> str:
    """`srun -N n torchrun ...`: each node's torchrun agent is the srun task (it carries SLURM_PROCID); its
    worker (RANK) is the rank (probes/ranks.py)."""
    return (f'export OMP_NUM_THREADS=1; exec "$0" -m torch.distributed.run --nnodes={nnodes} --nproc-per-node=1 '
            f'--node-rank=$SLURM_NODEID --master-addr=node1 --master-port={port} "$@"')


class SlurmJob:
    """tests/watch_jobs/train.py under `srun -J NAME -N n --ntasks-per-node 1` on a SlurmLab, and watch beside it as
    a user starts it: `srun --jobid J --overlap -N n --ntasks-per-node 1 ddpdoctor watch --gather --json`.
    The launch every Slurm watch lab test and benchmark shares; `close()` kills both (the lab's tag scan)."""

    def __init__(self, slurm, tmp: Path, name: str, nodes: int, wrap: str, seconds: float, job: Path = JOB,
                 env: dict | None = None):
        from slurmlab import DD, REPO_ROOT
        self.slurm, self.name, self.nodes, self.dd, self.root = slurm, name, nodes, DD, REPO_ROOT
        self.fault_file = tmp / "fault"
        self.log = tmp / f"{name}.log"
        env = {**slurm.env, "PYTHONPATH": str(REPO_ROOT), "FAULT_FILE": str(self.fault_file),
               "TRAIN_SECONDS": str(seconds), **(env or {})}
        with open(self.log, "w") as f:
            self.proc = slurm.lab.popen("head", ["srun", "-J", name, "-N", str(nodes), "--ntasks-per-node", "1",
                                                 "sh", "-c", wrap, DD[0], str(job)],
                                        env=env, stdout=f, stderr=subprocess.STDOUT)
        self.watch: subprocess.Popen | None = None
        self.events: list[dict] = []

    def wait_ready(self, timeout: float = 120.0) -> str:
        """Wait for every rank's "ready" line; the job id."""
        end = time.monotonic() + timeout
        while self.log.read_text().count("ready ") < self.nodes:
            assert self.proc.poll() is None and time.monotonic() < end, self.log.read_text()[-3000:]
            time.sleep(0.5)
        return self.slurm.run(["squeue", "-h", "-o", "%i", "-n", self.name], timeout=15).stdout.split()[0]

    def start_watch(self, jobid: str, deadline: float, *args: str) -> subprocess.Popen:
        """`watch --gather` on every node of the job; `events` grows as the first node prints them (with `at`)."""
        self.watch = self.slurm.lab.popen(
            "head", ["srun", "--jobid", jobid, "--overlap", "-N", str(self.nodes), "--ntasks-per-node", "1",
                     *self.dd, "watch", "--gather", "--json", "--deadline", str(deadline), *args],
            env={**self.slurm.env, "PYTHONPATH": str(self.root)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self.watch

    def finish(self, timeout: float) -> int:
        """Wait for watch to end by itself (its --deadline, or the job ending); its exit code."""
        rc = self.watch.wait(timeout)
        self._reader.join(10)
        return rc

    def _read(self):
        for ln in self.watch.stdout:
            self.events.append({**json.loads(ln), "at": time.monotonic()})

    def wait_for(self, kind: str, timeout: float) -> dict | None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            hit = [e for e in self.events if e["kind"] == kind]
            if hit:
                return hit[0]
            if self.watch.poll() is not None:
                self._reader.join(10)  # the lines it printed before it ended
                return next((e for e in self.events if e["kind"] == kind), None)
            time.sleep(0.5)
        return None

    def fault(self, spec: str) -> float:
        tmp = self.fault_file.with_suffix(".tmp")
        tmp.write_text(spec)
        tmp.replace(self.fault_file)
        return time.monotonic()

    def stderr(self) -> str:
        return self.watch.stderr.read() if self.watch is not None and self.watch.poll() is not None else ""

    def close(self) -> None:
        if self.watch is not None and self.watch.poll() is None:
            self.slurm.lab.kill(self.watch)
        self.slurm.lab.kill(self.proc)
