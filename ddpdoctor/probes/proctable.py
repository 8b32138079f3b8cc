"""One snapshot of the process table from /proc: plain records that probes/ranks.py judges.

Read only: /proc/<pid>/{stat,cmdline,environ,exe} for every process, and /proc/<pid>/maps and
/proc/<pid>/net/tcp only for the few processes whose rank is not in their environment (mp.spawn
children, srun tasks). `proc_root` lets tests point it at a copy of a /proc tree.

Why /proc and not psutil for the walk: one pass over a few hundred processes reads four small files
each; psutil would build an object per process and read the same files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

# Only these variables are kept from each environment (the rest may hold secrets and is not needed).
KEEP_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
             "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
             "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", "CUDA_VISIBLE_DEVICES",
             "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID",
             "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE",
             "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE",
             "ACCELERATE_MIXED_PRECISION", "ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_USE_DEEPSPEED",
             "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE",
             "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str                     # /proc/<pid>/stat state letter: R S D T t Z X ...
    argv: tuple[str, ...]
    env: Mapping[str, str] | None  # KEEP_VARS only; None: not readable (another user's process)
    cpu_ticks: int = 0             # utime + stime of the whole process
    start: int = 0                 # start time, clock ticks after boot: orders siblings
    exe: str = ""                  # /proc/<pid>/exe, "" when unreadable
    torch: bool | None = None      # libtorch mapped (read only for processes whose rank is not in the environment)
    tcp: bool | None = None        # holds an established TCP connection (same)

    @property
    def cmdline(self) -> str:
        return " ".join(self.argv)


def _read(path: str, mode: str = "rb") -> bytes | str | None:
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:  # gone, or not ours to read
        return None


def parse_stat(data: str) -> tuple[str, int, int, int] | None:
    """(state, ppid, utime+stime, starttime) from the text of /proc/<pid>/stat."""
    try:
        rest = data[data.rfind(")") + 2:].split()  # comm may hold spaces and parentheses
        return rest[0], int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[19])
    except (IndexError, ValueError):
        return None


def parse_environ(raw: bytes, keep: tuple[str, ...] | None = KEEP_VARS) -> dict[str, str]:
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            key = k.decode(errors="replace")
            if keep is None or key in keep:
                out[key] = v.decode(errors="replace")
    return out


def read_environ(pid: int, root: str = "/proc", keep: tuple[str, ...] | None = KEEP_VARS) -> dict[str, str] | None:
    raw = _read(f"{root}/{pid}/environ")
    return None if raw is None else parse_environ(raw, keep)


def read_stat(pid: int, root: str = "/proc") -> tuple[str, int, int, int] | None:
    data = _read(f"{root}/{pid}/stat", "r")
    return None if data is None else parse_stat(data)


def read_proc(pid: int, root: str = "/proc") -> Proc | None:
    st = read_stat(pid, root)
    if st is None:
        return None
    raw = _read(f"{root}/{pid}/cmdline")
    argv = tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a) if raw else ()
    try:
        exe = os.readlink(f"{root}/{pid}/exe")
    except OSError:
        exe = ""
    return Proc(pid, st[1], st[0], argv, read_environ(pid, root), st[2], st[3], exe)


def has_torch(pid: int, root: str = "/proc") -> bool | None:
    """libtorch / libc10 in the process's memory map: it imported torch. None when not readable."""
    raw = _read(f"{root}/{pid}/maps")
    if raw is None:
        return None
    return b"/libc10" in raw or b"/libtorch" in raw or b"/torch/_C" in raw


def socket_inodes(pid: int, root: str = "/proc") -> set[str] | None:
    """The inodes of the sockets among the process's open files (`socket:[N]` links); None when not readable."""
    try:
        fds = os.listdir(f"{root}/{pid}/fd")
    except OSError:
        return None
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"{root}/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def has_tcp(pid: int, root: str = "/proc") -> bool | None:
    """An ESTABLISHED (state 01) TCP socket among the process's open files: a rank that joined a process group
    holds its store and Gloo/NCCL bootstrap connections. None when not readable."""
    inodes = socket_inodes(pid, root)
    if inodes is None:
        return None
    if not inodes:
        return False
    for table in ("tcp", "tcp6"):
        data = _read(f"{root}/{pid}/net/{table}", "r") or ""
        for line in data.splitlines()[1:]:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "01" and parts[9] in inodes:
                return True
    return False


def snapshot(root: str = "/proc") -> dict[int, Proc]:
    """Every process this user may see, by pid."""
    out = {}
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for d in names:
        if d.isdigit():
            p = read_proc(int(d), root)
            if p is not None:
                out[p.pid] = p
    return out


def thread_ticks(pid: int, root: str = "/proc") -> int | None:
    """CPU ticks (user+system) of the process's main thread: a rank blocked in a Gloo wait uses none."""
    st = _read(f"{root}/{pid}/task/{pid}/stat", "r")
    parsed = parse_stat(st) if st else None
    return None if parsed is None else parsed[2]


def ancestors(pid: int, root: str = "/proc") -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        st = read_stat(pid, root)
        if st is None:
            break
        pid = st[1]
    return out


@dataclass(frozen=True)
class Activity:
    """Counters of one process that only grow while it works (cumulative; compare two reads)."""
    main_ticks: int | None       # main thread user+system clock ticks
    proc_ticks: int | None       # whole process
    main_wakeups: int | None     # main thread's voluntary context switches: each blocking wait that ended
    syscalls: int | None         # read/write-family system calls of the whole process (/proc/<pid>/io syscr+syscw)


def activity(pid: int, root: str = "/proc") -> Activity:
    wake = None
    for line in (_read(f"{root}/{pid}/task/{pid}/status", "r") or "").splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            wake = int(line.split()[1])
    sysc = None
    io = _read(f"{root}/{pid}/io", "r")  # root or the job's user only (ptrace read rights)
    if io:
        vals = dict(line.split(": ", 1) for line in io.splitlines() if ": " in line)
        try:
            sysc = int(vals["syscr"]) + int(vals["syscw"])
        except (KeyError, ValueError):
            sysc = None
    st = read_stat(pid, root)
    return Activity(thread_ticks(pid, root), st[2] if st else None, wake, sysc)


# --- what watch's busy-core rule reads (watch/corescan.py): where each process runs and how much CPU it used ---

TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100   # the clock ticks of stat's utime/stime


def _cpu_stat(pid: str, root: str) -> tuple[str, int, int, int, int] | None:
    """(comm, processor, utime+stime ticks, parent pid, start time in ticks after boot) of one process (proc(5) stat
    fields 2, 39, 14+15, 4, 22), None if it is gone. os.open/os.read, not open(): one scan reads every process's stat, so the cheaper call counts."""
    try:
        fd = os.open(f"{root}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            s = os.read(fd, 4096).decode("utf-8", "replace")
        finally:
            os.close(fd)
    except OSError:
        return None
    i, j = s.find("("), s.rfind(")")   # comm may hold spaces and parentheses
    rest = s[j + 2:].split()
    if i < 0 or len(rest) < 37:
        return None
    try:
        return s[i + 1:j], int(rest[36]), int(rest[11]) + int(rest[12]), int(rest[1]), int(rest[19])
    except ValueError:
        return None


def cpu_table(root: str = "/proc") -> dict[int, tuple[str, int, int, int, int]]:
    """Every process: pid -> (comm, the CPU its leader last ran on, its CPU ticks, its parent, its start in ticks
    after boot)."""
    out = {}
    for name in os.listdir(root):
        if name.isdigit() and (st := _cpu_stat(name, root)) is not None:
            out[int(name)] = st
    return out


def uptime(root: str = "/proc") -> float | None:
    """Seconds since boot (proc(5) /proc/uptime), the clock of stat's start time; None if unreadable."""
    try:
        with open(f"{root}/uptime") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def affinity(pid: int) -> list[int] | None:
    """The CPUs a process may run on (sched_getaffinity(2): a cpuset, taskset, Slurm's --cpu-bind), None if gone."""
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return None
