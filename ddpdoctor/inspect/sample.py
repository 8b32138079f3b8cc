"""Gather the facts `inspect` judges: the job's ranks, two stack samples apart, GPU memory per pid.

Only reads: /proc, `py-spy dump --nonblocking`, NVML (and, with --debug-server, the read-only handlers of
torch's debug server). Nothing that changes the job is sent to its processes.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.inspect.where import locate, signature
from ddpdoctor.probes import proctable, pyspy, ranks


@dataclass
class InspectFacts:
    host: str
    job: str
    ranks: list[dict[str, Any]]          # one record per rank process found on this node
    interval: float
    other_jobs: list[str] = field(default_factory=list)
    nvml: dict[str, Any] = field(default_factory=dict)   # probes.nvml.Snapshot as a dict, or {}
    pid_namespace_differs: bool = False
    nodes: list[dict[str, Any]] = field(default_factory=list)  # --gather: one entry per node of the step
    flightrec: dict[str, Any] = field(default_factory=dict)    # inspect/armed.py: the dumps' verdict, or why none
    watchdog: dict[str, Any] = field(default_factory=dict)     # inspect/armed.py: --log's watchdog lines
    fr_dumps: list[dict[str, Any]] = field(default_factory=list)  # --gather: this node's dumps as data
    jobs: list[dict[str, Any]] = field(default_factory=list)   # probes/ranks.py: every job here, its launcher tree
    chosen: str = ""                                            # why `job` is the one judged


class NoJob(Exception):
    """No torch.distributed job on this node (or not the one --pid names). `reason` says which case, so that
    `watch` (watch/ranks.py) can word it for its users from the same decision."""

    def __init__(self, message: str, reason: str = "none"):
        super().__init__(message)
        self.reason = reason  # none | idle | pid_idle | pid_unreadable | pid_gone | pid_not_job


def _job_of(job: ranks.Job, pid: int) -> bool:
    """Any process of the job: a rank, a rank's child or wrapper, its launcher, or a process above the launcher."""
    if pid in job.pids():
        return True
    return any(pid in proctable.ancestors(a) for a in [*(r.pid for r in job.ranks), *(a.pid for a in job.agents)])


def pick_job(disc: ranks.Discovery, pid: int | None, env=None) -> tuple[ranks.Job, str]:
    """The job to judge, and why this one: never one of several silently (the others are reported too)."""
    env = os.environ if env is None else env
    live = [j for j in disc.jobs if j.ranks]
    if pid is not None:
        for job in disc.jobs:
            if _job_of(job, pid):
                if not job.ranks:
                    raise NoJob(f"--pid {pid}: {job.notes[0] if job.notes else 'its job has no live rank'}", "pid_idle")
                return job, f"the job of pid {pid}"
        penv = proctable.read_environ(pid, keep=None)
        if penv is None:
            if os.path.exists(f"/proc/{pid}") and not can_ptrace_others():
                raise NoJob(f"--pid {pid}: its environment is not readable: {pyspy.PTRACE_HELP}", "pid_unreadable")
            raise NoJob(f"--pid {pid}: no such process, or its environment is not readable", "pid_gone")
        raise NoJob(f"--pid {pid}: not a process of a torch.distributed job (no RANK/WORLD_SIZE in its environment)",
                    "pid_not_job")
    if not live:
        idle = [n for j in disc.jobs for n in j.notes[:1]]
        if idle:
            raise NoJob(f"no rank of a torch.distributed job on this node: {idle[0]}", "idle")
        more = (f" ({disc.unreadable} processes' environments not readable: run as root or as the job's user)"
                if disc.unreadable and not can_ptrace_others() else "")
        raise NoJob(f"no torch.distributed job on this node: no process has RANK/WORLD_SIZE in its environment{more}")
    if len(live) == 1:
        return live[0], "the only job on this node"
    sjob = env.get("SLURM_JOB_ID")
    mine = [j for j in live if sjob and j.key.startswith(f"slurm:{sjob}.")]
    if mine:  # srun --jobid J --overlap ddpdoctor inspect: the allocation names the job
        return max(mine, key=lambda j: len(j.ranks)), f"the job of Slurm job {sjob}, whose allocation inspect runs in"
    best = live[0]  # jobs come largest first
    return best, f"the largest of {len(live)} jobs on this node ({len(best.ranks)} ranks); --pid picks another"


def can_ptrace_others() -> bool:
    """Root with CAP_SYS_PTRACE (bit 19 of CapEff): may read any process's environ and stack."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return os.geteuid() == 0 and bool(int(line.split()[1], 16) >> 19 & 1)
    except (OSError, ValueError):
        pass
    return os.geteuid() == 0


def _nvml_snapshot() -> dict[str, Any]:
    from ddpdoctor.probes import nvml
    return nvml.snapshot().to_dict()


def _stacks(procs, dump_timeout: float, fallback):
    """py-spy's dumps; for the ranks py-spy may not read (no ptrace rights), `fallback`'s when given
    (inspect --debug-server: the debug server's tracebacks, which need no ptrace)."""
    dumps = pyspy.dump_all([p.pid for p in procs], dump_timeout)
    denied = [p for p in procs if dumps[p.pid].kind == "permission"]
    if fallback is not None and denied:
        got = fallback([{"rank": p.rank, "pid": p.pid, "env": dict(p.env), "world_size": p.world_size} for p in denied],
                       dump_timeout)
        dumps.update({pid: d for pid, d in got.items() if d.ok})  # else py-spy's refusal stands
    return dumps


def collect(pid: int | None = None, interval: float = 1.0, dump_timeout: float = 3.0, nvml: bool = True,
            fallback=None, counters=None) -> InspectFacts:
    """`counters` (inspect --debug-server: debugserver.collective_counts) is read before the first stack sample
    and after the second: collectives each rank entered in between, the strongest sign of progress."""
    me = proctable.ancestors(os.getpid())
    disc = ranks.discover(exclude=me)
    job, why = pick_job(disc, pid)
    procs = list(job.ranks)
    pids = [p.pid for p in procs]
    hz = os.sysconf("SC_CLK_TCK")
    rank_dicts = [{"rank": p.rank, "pid": p.pid, "env": dict(p.env), "world_size": p.world_size} for p in procs]
    seq0 = _counts(counters, rank_dicts, dump_timeout)
    act0 = {p: proctable.activity(p) for p in pids}
    t0 = time.monotonic()
    first = _stacks(procs, dump_timeout, fallback)
    snap = _nvml_snapshot() if nvml else {}
    drivers = _driver_samplers(pids)   # a CUDA rank spinning at one line: in the driver, or computing?
    time.sleep(max(0.0, interval - (time.monotonic() - t0)))
    second = _stacks(procs, dump_timeout, fallback)
    driver = _drain(drivers)
    elapsed = time.monotonic() - t0
    act1 = {p: proctable.activity(p) for p in pids}
    seq1 = _counts(counters, rank_dicts, dump_timeout) if seq0 else {}
    records = []
    host = socket.gethostname()
    for p in procs:
        samples = []
        for d in (first[p.pid], second[p.pid]):
            main = d.main_thread() if d.ok else None
            samples.append({"ok": d.ok, "kind": d.kind, "error": d.error, "took_s": round(d.took_s, 3),
                            "where": locate(main) if d.ok else None,
                            "signature": [list(x) for x in signature(main)] if d.ok else None,
                            "threads": len(d.threads), **({"source": d.extra["source"]} if d.extra.get("source") else {})})
        st = proctable.read_stat(p.pid)
        a, b = act0[p.pid], act1[p.pid]
        cpu = None
        if a.main_ticks is not None and b.main_ticks is not None:
            cpu = round((b.main_ticks - a.main_ticks) / hz / max(elapsed, 1e-3), 3)
        # counters that move while the rank works (facts/progress.py judges them)
        wake = None if a.main_wakeups is None or b.main_wakeups is None else b.main_wakeups - a.main_wakeups
        sysc = None if a.syscalls is None or b.syscalls is None else round((b.syscalls - a.syscalls) / max(elapsed, 1e-3), 1)
        if seq0 or any(x.extra.get("source") for x in (first[p.pid], second[p.pid])):
            sysc = None  # our own requests to its debug server made it read and write: not the job's progress
        records.append({"rank": p.rank, "pid": p.pid, "host": host, "local_rank": p.local_rank,
                        "world_size": p.world_size, "launcher": p.launcher, "state": st[0] if st else "gone",
                        "state_before": p.state, "main_thread_cpu": cpu, "env": dict(p.env), "samples": samples,
                        "cmdline": p.cmdline, "generation": p.generation, "agent": p.agent, "members": list(p.members),
                        "wrappers": list(p.wrappers), "rank_from": p.source, "main_wakeups": wake,
                        "syscalls_per_s": sysc, "seconds": round(elapsed, 3),
                        **({"collectives": seq1[p.rank] - seq0[p.rank]} if p.rank in seq0 and p.rank in seq1 else {}),
                        **({"gpu_driver": driver[p.pid]} if p.pid in driver else {})})
    others = sorted(j.key for j in disc.jobs if j is not job)
    return InspectFacts(host, job.key, records, round(elapsed, 3), others, snap, _pid_namespace_differs(),
                        jobs=[{**j.to_dict(), "host": host, "chosen": j is job} for j in disc.jobs], chosen=why)


def _driver_samplers(pids: list[int]) -> dict:
    """A perf sampler on the main thread of each rank that has the CUDA driver mapped (probes/ipsample.py:
    the kernel samples its instruction pointer, the rank is never stopped); none where perf is refused."""
    from ddpdoctor.probes import ipsample
    out = {}
    for pid in pids:
        if ipsample.maps_has(pid, "libcuda.so"):
            s, _why = ipsample.open_sampler(pid)
            if s is None:
                break   # refused for one, refused for all
            out[pid] = s
    return out


def _drain(samplers: dict) -> dict[int, dict[str, int]]:
    from ddpdoctor.probes.ipsample import driver_only
    out = {}
    for pid, s in samplers.items():
        try:
            drv, other = driver_only(s.drain())
            out[pid] = {"driver": drv, "other": other}
        finally:
            s.close()
    return out


def _counts(counters, ranks, timeout: float) -> dict[int, int]:
    if counters is None:
        return {}
    try:
        return counters(ranks, min(timeout, 5.0))
    except Exception:  # noqa: BLE001 - a debug server that does not answer leaves the other evidence
        return {}


def _pid_namespace_differs() -> bool:
    """True inside a container with its own pid namespace: NVML then reports host pids we cannot map."""
    # NSpid in /proc/self/status lists our pid in every namespace from the outermost: more than one -> nested
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return len(line.split()) > 2
    except OSError:
        pass
    return False
