"""Which processes on this node are ranks of a torch.distributed job, read from /proc/<pid>/environ.

Plain facts: pid, rank, world size, local rank, the job key, the process state. A launcher sets
these variables in the environment it starts each rank with (torchrun: torch/distributed/elastic/
agent/server/local_elastic_agent.py `_start_workers`; srun: SLURM_PROCID; mpirun: OMPI_COMM_WORLD_RANK),
so they are visible from outside even though the job never reports them. A variable a script sets
with `os.environ[...] = ...` after start is not in /proc/<pid>/environ: such ranks (mp.spawn) are
found only when the launcher set them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

KEEP_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
             "TORCHELASTIC_RUN_ID", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID",
             "SLURM_LOCALID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
             "OMPI_COMM_WORLD_LOCAL_RANK", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE",
             "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


@dataclass(frozen=True)
class RankProc:
    pid: int
    ppid: int
    rank: int
    world_size: int | None
    local_rank: int | None
    job: str            # what groups ranks into one job (run id, master endpoint, Slurm step)
    launcher: str
    state: str          # /proc/<pid>/stat state letter: R S D T Z ...
    cmdline: str
    env: Mapping[str, str] = field(default_factory=dict)  # only KEEP_VARS


@dataclass(frozen=True)
class Discovery:
    ranks: tuple[RankProc, ...]
    unreadable: int     # processes whose environ we may not read (another user's, without root)


def read_environ(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except (PermissionError, ProcessLookupError, FileNotFoundError, OSError):
        return None
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def read_stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, ppid, utime+stime ticks) from /proc/<pid>/stat, or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()  # comm may hold spaces and parentheses
    return rest[0], int(rest[1]), int(rest[11]) + int(rest[12])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def job_key(env: Mapping[str, str]) -> str:
    if env.get("TORCHELASTIC_RUN_ID"):
        return f"torchelastic:{env['TORCHELASTIC_RUN_ID']}"
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"master:{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    if env.get("SLURM_JOB_ID"):
        return f"slurm:{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '?')}"
    if env.get("OMPI_COMM_WORLD_SIZE"):
        return f"mpi:{env.get('OMPI_MCA_orte_hnp_uri') or env.get('PMIX_NAMESPACE') or '?'}"
    return "unknown"


def rank_of(pid: int, env: Mapping[str, str], cmdline: str) -> tuple[int, int | None, int | None, str] | None:
    from ddpdoctor.launch import RANK_VARS  # the one table of what each launcher exports
    for rv, wv, lv, _lws, launcher in RANK_VARS:
        rank = _int(env.get(rv))
        if rank is None:
            continue
        if launcher == "srun" and "python" not in cmdline.split(" ", 1)[0]:
            return None  # every srun task has SLURM_PROCID: only a Python one can be a torch rank
        return rank, _int(env.get(wv)), _int(env.get(lv)), launcher
    return None


def discover(pids: list[int] | None = None, exclude: set[int] = frozenset()) -> Discovery:
    """Every process that a launcher started as a rank, minus their own children that inherited the
    same rank (DataLoader workers, compile workers): those are part of the rank, not ranks."""
    if pids is None:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    found: dict[int, RankProc] = {}
    unreadable = 0
    for pid in pids:
        if pid in exclude:
            continue
        env = read_environ(pid)
        if env is None:
            unreadable += os.path.exists(f"/proc/{pid}")
            continue
        if not env:
            continue  # kernel threads
        cmd = _cmdline(pid)
        r = rank_of(pid, env, cmd)
        st = read_stat(pid)
        if r is None or st is None:
            continue
        found[pid] = RankProc(pid, st[1], r[0], r[1], r[2], job_key(env), r[3], st[0], cmd[:300],
                              {k: env[k] for k in KEEP_VARS if k in env})
    ranks = []
    for p in found.values():
        parent = found.get(p.ppid)
        if parent is not None and parent.job == p.job and parent.rank == p.rank:
            continue
        ranks.append(p)
    return Discovery(tuple(sorted(ranks, key=lambda p: (p.job, p.rank, p.pid))), unreadable)


def ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        st = read_stat(pid)
        if st is None:
            break
        pid = st[1]
    return out


def thread_ticks(pid: int) -> int | None:
    """CPU ticks (user+system) of the process's main thread: a rank blocked in a Gloo wait uses none."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return int(rest[11]) + int(rest[12])
