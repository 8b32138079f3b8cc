"""Which processes are the job's ranks: the one place `watch` asks (an adapter over probes/jobprocs.py).

`watch` needs, per rank: pid, rank, world size, local rank, the job it belongs to, its launcher's pid
and the environment variables that say where an armed job writes. Everything else in watch/ reads
`Rank` records from here, so the rank-finding module can change under it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from ddpdoctor.probes import jobprocs


@dataclass(frozen=True)
class Rank:
    pid: int
    rank: int
    world_size: int | None
    local_rank: int | None
    job: str
    launcher: str
    ppid: int
    env: Mapping[str, str] = field(default_factory=dict)


class NoJob(Exception):
    """No torch.distributed job here (or not the one --pid names): one line for the user."""


def _ranks_only(found: list[jobprocs.RankProc]) -> list[jobprocs.RankProc]:
    """Drop launchers that carry a rank variable themselves: `srun torchrun` gives torchrun's agent
    SLURM_PROCID, but the ranks are the workers below it (they carry RANK)."""
    below: set[int] = set()
    for p in found:
        below |= jobprocs.ancestors(p.ppid) if p.launcher == "torchrun" else set()
    return [p for p in found if not (p.pid in below and p.launcher != "torchrun")]


def find(pid: int | None = None, exclude: set[int] | frozenset = frozenset()) -> tuple[str, list[Rank], list[str]]:
    """(job key, its ranks on this node, other jobs' keys). With `pid`: the job that process belongs to
    (a rank, a rank's child, or the launcher above the ranks); else the job with most ranks here."""
    disc = jobprocs.discover(exclude=set(exclude) | jobprocs.ancestors(os.getpid()))
    jobs: dict[str, list[jobprocs.RankProc]] = {}
    for r in _ranks_only(list(disc.ranks)):
        jobs.setdefault(r.job, []).append(r)
    if pid is not None:
        key = next((k for k, procs in jobs.items() for r in procs
                    if r.pid == pid or r.ppid == pid or pid in jobprocs.ancestors(r.pid)), None)
        if key is None:
            raise NoJob(f"--pid {pid}: not a process of a running torch.distributed job "
                        "(no rank below it or above it has RANK/WORLD_SIZE in its environment)")
    elif jobs:
        key = max(jobs, key=lambda k: len(jobs[k]))
    else:
        raise NoJob("no torch.distributed job on this node: no process has RANK/WORLD_SIZE in its environment")
    procs = jobs[key]
    return key, [Rank(p.pid, p.rank, p.world_size, p.local_rank, p.job, p.launcher, p.ppid, dict(p.env))
                 for p in procs], sorted(k for k in jobs if k != key)


def children(pid: int) -> list[int]:
    """The rank's child processes (DataLoader workers, compile workers), from /proc/<pid>/task/*/children."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out.extend(int(x) for x in f.read().split())
            except OSError:
                continue
    except OSError:
        return []
    return sorted(set(out))
