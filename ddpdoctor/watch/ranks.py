"""Which processes are the job's ranks, for `watch`: probes/ranks.py decides, inspect's pick_job chooses.

No rank-finding of its own: probes/ranks.py (the one owner of "which process is a rank": srun -> torchrun,
wrappers, mp.spawn, elastic generations) reads /proc, and inspect/sample.py's `pick_job` picks the job
exactly as `inspect` does (--pid's job; else the Slurm allocation's; else the largest, the others named).
Only the words a watch user reads for "--pid is not a job" are watch's own.
"""
from __future__ import annotations

import os

from ddpdoctor.inspect import sample
from ddpdoctor.probes import proctable
from ddpdoctor.probes import ranks as probe

Rank = probe.Rank  # watch reads pid, rank, world_size, local_rank, job, launcher, ppid, env


class NoJob(Exception):
    """No torch.distributed job here (or not the one --pid names): one line for the user."""


def find(pid: int | None = None, exclude=frozenset()) -> tuple[str, list[Rank], list[str]]:
    """(job key, its ranks on this node, the other jobs' keys): the job inspect would judge."""
    disc = probe.discover(exclude=set(exclude) | proctable.ancestors(os.getpid()))
    try:
        job, _why = sample.pick_job(disc, pid)
    except sample.NoJob as e:
        if e.reason == "pid_not_job":
            raise NoJob(f"--pid {pid}: not a process of a running torch.distributed job "
                        "(no rank below it or above it has RANK/WORLD_SIZE in its environment)") from None
        raise NoJob(str(e)) from None
    return job.key, list(job.ranks), sorted(j.key for j in disc.jobs if j is not job)


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
