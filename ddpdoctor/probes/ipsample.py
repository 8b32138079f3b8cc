"""Which shared library a thread's CPU time goes to, sampled by the kernel without stopping the thread.

A thread that spins in a CUDA synchronisation (cudaStreamSynchronize, a device-to-host copy behind
`.item()`: the driver's default schedule spins, CUDA Runtime API, cudaSetDeviceFlags) runs inside the
driver library, libcuda.so.1, the whole time: gdb backtraces of such hangs show nothing but libcuda
frames under the runtime's cudaStreamSynchronize / cudaMemcpyAsync (pytorch/pytorch#95944,
rwth-i6/returnn#1811). Reading the thread's instruction pointer is all it takes to see that, and the
kernel's perf events do it without a ptrace stop (py-spy refuses `--native` with `--nonblocking`:
native unwinding needs the process stopped):

  perf_event_open(2) on the thread, PERF_TYPE_SOFTWARE / PERF_COUNT_SW_TASK_CLOCK (it ticks only
  while the thread is on a CPU), one PERF_SAMPLE_IP record every PERIOD_NS of its CPU time, user
  space only (exclude_kernel: allowed at kernel.perf_event_paranoid <= 2 for one's own processes,
  and to root / CAP_PERFMON always), read from the mmap'ed ring buffer (perf_event_open(2),
  "MMAP layout"); each address is mapped to its file through /proc/<pid>/maps.

The thread is interrupted once per PERIOD_NS of its CPU time for a few microseconds, as any profiler
does; it is never stopped. Where perf events are refused (a container's seccomp profile, a paranoid
setting of 3), `open_sampler` returns None with the reason and nothing is claimed.
"""
from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import platform
import struct
from collections import Counter
from dataclasses import dataclass

PERIOD_NS = 1_000_000          # one sample per ms of the thread's CPU time: a step's few ms of Python are seen
PAGES = 16                     # ring buffer data pages: 64 KiB = 4096 samples of 16 bytes, drained every tick
_NR = {"x86_64": 298, "aarch64": 241, "ppc64le": 319}   # __NR_perf_event_open (asm/unistd*.h)
_PERF_TYPE_SOFTWARE, _SW_TASK_CLOCK, _SAMPLE_IP = 1, 1, 1
_FLAG_DISABLED, _FLAG_EXCLUDE_KERNEL, _FLAG_EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
_IOC_ENABLE, _IOC_DISABLE = 0x2400, 0x2401
_RECORD_SAMPLE, _RECORD_LOST = 9, 2
_FD_CLOEXEC = 8


def _attr() -> bytes:
    """struct perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes: every kernel since 2.6.31 takes it)."""
    flags = _FLAG_DISABLED | _FLAG_EXCLUDE_KERNEL | _FLAG_EXCLUDE_HV
    # type, size, config, sample_period, sample_type, read_format, flags, wakeup_events, bp_type, config1
    return struct.pack("=IIQQQQQIIQ", _PERF_TYPE_SOFTWARE, 64, _SW_TASK_CLOCK, PERIOD_NS, _SAMPLE_IP, 0, flags,
                       0, 0, 0)


@dataclass
class Maps:
    """/proc/<pid>/maps as sorted executable ranges -> file basename ("[vdso]" for the vDSO)."""
    starts: list
    ranges: list

    @classmethod
    def read(cls, pid: int) -> "Maps":
        rows = []
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) < 5 or "x" not in parts[1]:
                        continue
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    path = parts[5].strip() if len(parts) > 5 else ""
                    rows.append((lo, hi, os.path.basename(path) if path.startswith("/") else (path or "[anon]")))
        except OSError:
            pass
        rows.sort()
        return cls([r[0] for r in rows], rows)

    def lib(self, ip: int) -> str:
        i = bisect.bisect_right(self.starts, ip) - 1
        if i >= 0 and self.ranges[i][0] <= ip < self.ranges[i][1]:
            return self.ranges[i][2]
        return "?"


def maps_has(pid: int, prefix: str) -> bool:
    """The process has a library whose file name starts with `prefix` mapped (libcuda.so: it uses CUDA)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any(os.path.basename(line.rstrip("\n").split(None, 5)[-1]).startswith(prefix) for line in f)
    except OSError:
        return False


class Sampler:
    """An open perf event on one thread. `drain()` returns {library: samples} since the last drain."""

    def __init__(self, pid: int, tid: int, fd: int, ring: mmap.mmap):
        self.pid, self.tid, self.fd, self.ring = pid, tid, fd, ring
        self.page = mmap.PAGESIZE
        self.maps = Maps.read(pid)
        self.lost = 0

    def drain(self) -> Counter:
        out: Counter = Counter()
        head = struct.unpack_from("=Q", self.ring, 1024)[0]    # data_head (struct perf_event_mmap_page)
        tail = struct.unpack_from("=Q", self.ring, 1032)[0]    # data_tail
        size = PAGES * self.page
        unknown = 0
        while tail < head:
            off = self.page + tail % size
            typ, _misc, rsize = struct.unpack_from("=IHH", self._read(off, 8, size))
            if rsize < 8:
                break
            if typ == _RECORD_SAMPLE and rsize >= 16:
                ip = struct.unpack_from("=Q", self._read(off + 8, 8, size))[0]
                lib = self.maps.lib(ip)
                if lib == "?":
                    unknown += 1
                out[lib] += 1
            elif typ == _RECORD_LOST and rsize >= 24:
                self.lost += struct.unpack_from("=Q", self._read(off + 16, 8, size))[0]
            tail += rsize
        struct.pack_into("=Q", self.ring, 1032, tail)   # hand the space back to the kernel
        if unknown:  # a library loaded since the maps were read: re-read them once for the next drain
            self.maps = Maps.read(self.pid)
        return out

    def _read(self, off: int, n: int, size: int) -> bytes:
        end = self.page + size
        if off + n <= end:
            return self.ring[off:off + n]
        first = end - off
        return self.ring[off:end] + self.ring[self.page:self.page + n - first]  # a record that wraps

    def close(self) -> None:
        try:
            _ioctl(self.fd, _IOC_DISABLE)
        finally:
            self.ring.close()
            os.close(self.fd)


_libc = None


def _ioctl(fd: int, req: int) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.ioctl(fd, req, 0)


def open_sampler(pid: int, tid: int | None = None) -> tuple[Sampler | None, str]:
    """Start sampling thread `tid` (default: the main thread) of `pid`: (Sampler, "") or (None, why not)."""
    nr = _NR.get(platform.machine())
    if nr is None:
        return None, f"perf events: no syscall number known for {platform.machine()}"
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(_attr(), 64)
    fd = _libc.syscall(nr, attr, tid or pid, -1, -1, _FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        return None, f"perf_event_open refused: {os.strerror(err)} (kernel.perf_event_paranoid, seccomp, or rights)"
    try:
        ring = mmap.mmap(fd, (1 + PAGES) * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError) as e:
        os.close(fd)
        return None, f"perf ring buffer: {e}"
    if _ioctl(fd, _IOC_ENABLE) != 0:
        ring.close()
        os.close(fd)
        return None, "perf event could not be enabled"
    return Sampler(pid, tid or pid, fd, ring), ""


# What the samples of a rank that waits on its GPU land in (watch/gpuwait.py, inspect/sample.py)
DRIVER = "libcuda.so"
NEUTRAL = ("[vdso]", "libc.so", "libpthread.so", "ld-linux", "[anon]", "libcudart")  # the driver's clock reads, yields


def driver_only(libs: Counter) -> tuple[int, int]:
    """(samples in the driver, samples elsewhere) of one drain; the driver's own helpers count for neither."""
    drv = sum(n for lib, n in libs.items() if lib.startswith(DRIVER))
    other = sum(n for lib, n in libs.items() if not lib.startswith(DRIVER) and not lib.startswith(NEUTRAL))
    return drv, other
