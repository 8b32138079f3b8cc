"""The old flat view of a node's ranks, kept as an adapter over probes/ranks.py (the one owner of which
process is a rank) for callers written against it (the `watch` branch); new code reads probes/ranks.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ddpdoctor.probes.proctable import ancestors, read_environ, read_stat, thread_ticks  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class RankProc:
    pid: int
    ppid: int
    rank: int
    world_size: int | None
    local_rank: int | None
    job: str
    launcher: str
    state: str
    cmdline: str
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Discovery:
    ranks: tuple[RankProc, ...]
    unreadable: int


def discover(pids: list[int] | None = None, exclude: Iterable[int] = frozenset()) -> Discovery:
    """Every rank of every job on this node (probes/ranks.py decides which process is a rank)."""
    from ddpdoctor.probes import ranks
    disc = ranks.discover(exclude=exclude)
    out = [RankProc(r.pid, r.ppid, r.rank, r.world_size, r.local_rank, j.key, r.launcher, r.state, r.cmdline, r.env)
           for j in disc.jobs for r in j.ranks if pids is None or r.pid in pids]
    return Discovery(tuple(sorted(out, key=lambda p: (p.job, p.rank, p.pid))), disc.unreadable)
