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
from ddpdoctor.probes import jobprocs, pyspy


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


class NoJob(Exception):
    """No torch.distributed job on this node (or not the one --pid names)."""


def pick_job(disc: jobprocs.Discovery, pid: int | None) -> tuple[str, list[jobprocs.RankProc], list[str]]:
    jobs: dict[str, list[jobprocs.RankProc]] = {}
    for r in disc.ranks:
        jobs.setdefault(r.job, []).append(r)
    if pid is not None:
        # any process of the job: a rank, a rank's child, or the launcher above the ranks
        for key, procs in jobs.items():
            for r in procs:
                if r.pid == pid or pid in jobprocs.ancestors(r.pid) or r.ppid == pid:
                    return key, procs, sorted(k for k in jobs if k != key)
        env = jobprocs.read_environ(pid)
        if env is None:
            if os.path.exists(f"/proc/{pid}") and not can_ptrace_others():
                raise NoJob(f"--pid {pid}: its environment is not readable: {pyspy.PTRACE_HELP}")
            raise NoJob(f"--pid {pid}: no such process, or its environment is not readable")
        raise NoJob(f"--pid {pid}: not a process of a torch.distributed job (no RANK/WORLD_SIZE in its environment)")
    if not jobs:
        more = (f" ({disc.unreadable} processes' environments not readable: run as root or as the job's user)"
                if disc.unreadable and not can_ptrace_others() else "")
        raise NoJob(f"no torch.distributed job on this node: no process has RANK/WORLD_SIZE in its environment{more}")
    key = max(jobs, key=lambda k: len(jobs[k]))
    return key, jobs[key], sorted(k for k in jobs if k != key)


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
            fallback=None) -> InspectFacts:
    me = jobprocs.ancestors(os.getpid())
    disc = jobprocs.discover(exclude=me)
    key, procs, others = pick_job(disc, pid)
    pids = [p.pid for p in procs]
    ticks0 = {p: jobprocs.thread_ticks(p) for p in pids}
    t0 = time.monotonic()
    first = _stacks(procs, dump_timeout, fallback)
    snap = _nvml_snapshot() if nvml else {}
    time.sleep(max(0.0, interval - (time.monotonic() - t0)))
    second = _stacks(procs, dump_timeout, fallback)
    elapsed = time.monotonic() - t0
    ticks1 = {p: jobprocs.thread_ticks(p) for p in pids}
    hz = os.sysconf("SC_CLK_TCK")
    records = []
    for p in procs:
        samples = []
        for d in (first[p.pid], second[p.pid]):
            main = d.main_thread() if d.ok else None
            samples.append({"ok": d.ok, "kind": d.kind, "error": d.error, "took_s": round(d.took_s, 3),
                            "where": locate(main) if d.ok else None,
                            "signature": [list(x) for x in signature(main)] if d.ok else None,
                            "threads": len(d.threads), **({"source": d.extra["source"]} if d.extra.get("source") else {})})
        st = jobprocs.read_stat(p.pid)
        cpu = None
        if ticks0[p.pid] is not None and ticks1[p.pid] is not None:
            cpu = round((ticks1[p.pid] - ticks0[p.pid]) / hz / max(elapsed, 1e-3), 3)
        records.append({"rank": p.rank, "pid": p.pid, "host": socket.gethostname(), "local_rank": p.local_rank,
                        "world_size": p.world_size, "launcher": p.launcher, "state": st[0] if st else "gone",
                        "state_before": p.state, "main_thread_cpu": cpu, "env": dict(p.env), "samples": samples,
                        "cmdline": p.cmdline})
    return InspectFacts(socket.gethostname(), key, records, round(elapsed, 3), others, snap,
                        _pid_namespace_differs())


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
