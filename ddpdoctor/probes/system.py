"""Node facts for the system checks: /dev/shm, the locked-memory limit, RDMA devices, nccl.conf.

No judgement here (ddpdoctor/checks/system.py decides); every read is a few syscalls, so the Slurm
prolog can afford all of them on every job start.
"""
from __future__ import annotations

import os
import resource
import stat
from dataclasses import dataclass


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    source: str
    options: tuple[str, ...]

    @property
    def readonly(self) -> bool:
        return "ro" in self.options


@dataclass(frozen=True)
class ShmInfo:
    path: str
    exists: bool
    size: int = 0          # bytes the filesystem holds in all
    free: int = 0          # bytes an unprivileged user can still write
    mode: int = 0          # permission bits, e.g. 0o1777
    mount: Mount | None = None
    error: str = ""
    largest: tuple[tuple[str, int], ...] = ()  # (file, bytes): what fills it, biggest first

    @property
    def used(self) -> int:
        return max(0, self.size - self.free)


def _unescape(s: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo
    return s.encode().decode("unicode_escape") if "\\" in s else s


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> Mount | None:
    """The mount that holds `path` in this process's mount namespace (the last, longest match)."""
    try:
        real = os.path.realpath(path)
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best: Mount | None = None
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(parts) < 6 or len(rparts) < 2:
            continue
        point = _unescape(parts[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.point)):
            opts = tuple(parts[5].split(",")) + tuple(rparts[2].split(",") if len(rparts) > 2 else ())
            best = Mount(point, rparts[0], _unescape(rparts[1]), opts)
    return best


def shm_info(path: str = "/dev/shm", *, largest: int = 5) -> ShmInfo:
    try:
        st = os.stat(path)
        vfs = os.statvfs(path)
    except FileNotFoundError:
        return ShmInfo(path, False, error="does not exist")
    except OSError as e:
        return ShmInfo(path, False, error=e.strerror or str(e))
    big: list[tuple[str, int]] = []
    if largest:
        try:
            with os.scandir(path) as it:
                for e in it:
                    try:
                        if e.is_file(follow_symlinks=False):
                            big.append((e.name, e.stat(follow_symlinks=False).st_blocks * 512))
                    except OSError:
                        continue
        except OSError:
            pass
        big.sort(key=lambda t: -t[1])
    return ShmInfo(path, True, vfs.f_blocks * vfs.f_frsize, vfs.f_bavail * vfs.f_frsize, stat.S_IMODE(st.st_mode),
                   mount_of(path), "", tuple(big[:largest]))


@dataclass(frozen=True)
class Limit:
    soft: int | None  # None: unlimited
    hard: int | None


def memlock() -> Limit:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    inf = resource.RLIM_INFINITY
    return Limit(None if soft == inf else soft, None if hard == inf else hard)


def rdma_devices(sysfs: str = "/sys/class/infiniband") -> tuple[str, ...]:
    """InfiniBand / RoCE devices the kernel knows (mlx5_0, ...): the ones NCCL's IB transport pins memory for."""
    try:
        return tuple(sorted(os.listdir(sysfs)))
    except OSError:
        return ()


def read_nccl_conf(paths: tuple[str, ...] = ("/etc/nccl.conf",)) -> dict[str, str]:
    """`NAME=value` lines of NCCL's configuration files (NCCL reads them when the variable is not set)."""
    out: dict[str, str] = {}
    for p in paths:
        try:
            with open(p) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            k, _, v = line.partition("=")
            k = k.strip()
            if k.startswith("NCCL_") and k not in out:
                out[k] = v.strip()
    return out
