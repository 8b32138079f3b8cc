"""Native crash reports: which library a signal hit, read from the backtrace a crash handler prints under it.

* SIGBUS in NCCL's code -> NCCL_SHM_TOO_SMALL. NCCL's only file-backed shared mappings are its /dev/shm segments:
  NCCL 2.12.7 .. 2.18.x create them with ftruncate(2) and mmap(MAP_SHARED) (src/misc/shmutils.cc ncclShmOpen;
  2.4 .. 2.11 posix_fallocate first, 2.19.1+ fallocate(2)). A page of a sparse tmpfs file that /dev/shm has no room
  for faults with SIGBUS at its first touch (Linux mm/shmem.c shmem_fault: the -ENOSPC of the page allocation becomes
  VM_FAULT_SIGBUS), in NCCL's thread, with no NCCL error line. The DataLoader's shm traffic is not
  in NCCL's frames, so its exit code -7 lines are then NCCL's SIGBUS, not the DataLoader's (capped).
"""
from __future__ import annotations

import re

from ddpdoctor.logscan.evidence import Collector, Evidence
from ddpdoctor.logscan.rules import _version

SIGBUS = "7"
# A frame of UCX's backtrace (ucs/debug/debug.c UCS_DEBUG_BACKTRACE_LINE_FMT "%2d 0x%016lx %s()  %s:%u"):
# symbol and file. NCCL's internal symbols are hidden, so an address in libnccl resolves to the nearest
# exported one (ncclGroupEnd, ncclGetUniqueId) or to `???()  .../libnccl.so.2`.
_FRAME = re.compile(r"^\s*\d+\s+0x[0-9a-fA-F]+\s+(?P<func>\S+?)\(\)\s+(?P<file>\S+?):\d+\s*$")
_NCCL = re.compile(r"^(?:p?nccl[A-Z]\w*)$|libnccl[\w.-]*\.so")
# the first NCCL release whose shm segments are fallocate()d (a full /dev/shm then fails with a WARN, not SIGBUS)
_FALLOCATE_SINCE = (2, 19, 1)
_DATALOADER_OWN = ("UNEXPECTED_BUS_ERROR_ENCOUNTERED_IN", "IS_KILLED_BY_SIGNAL_BUS", "UNABLE_TO_ALLOCATE_SHARED_MEMORY",
                   "UNABLE_TO_WRITE_TO_FILE")
SIGNATURES_USED = tuple(("DATALOADER_SHM_BUS_ERROR", n) for n in _DATALOADER_OWN)  # tests/test_catalog.py


def _backtrace(after: str) -> list[tuple[str, str]]:
    """The frames of the first backtrace under a signal line (other processes' lines may come between)."""
    frames: list[tuple[str, str]] = []
    for ln in after.split("\n"):
        m = _FRAME.match(ln)
        if m:
            frames.append((m.group("func"), m.group("file")))
        elif frames and ln.lstrip().startswith("===="):
            break
    return frames


def sigbus_in_nccl(col: Collector, add, caps) -> None:
    for v in col.facts.get("native_signal", []):
        if v.value.get("sig") != SIGBUS:
            continue
        frames = [f for f in _backtrace(v.value.get("after", "")) if _NCCL.search(f[0]) or _NCCL.search(f[1])]
        if not frames:
            continue
        func, file = frames[0]
        where = f"{func}()" if func != "???" else file
        versions = [_version(x) for x in col.fact_values("nccl_version", "v")]
        if versions and all(x >= _FALLOCATE_SINCE for x in versions):
            add("NCCL_SHM_TOO_SMALL", 0.4, f"low confidence: SIGBUS in NCCL's code ({where}), but this NCCL allocates "
                "its /dev/shm segments up front (2.19.1+), so a full /dev/shm would have failed with a WARN; what would "
                "decide: `df -h /dev/shm` in the container", [Evidence(v.line, v.text, v.host, v.rank)])
            return
        add("NCCL_SHM_TOO_SMALL", 0.65, f"SIGBUS in NCCL's code ({where}): a page of NCCL's /dev/shm segment that "
            "/dev/shm could not back (NCCL 2.12-2.18 map sparse segments); `df -h /dev/shm` in the container confirms",
            [Evidence(v.line, v.text, v.host, v.rank)])
        if not any(col.sig_evidence(["DATALOADER_SHM_BUS_ERROR"], n) for n in _DATALOADER_OWN):
            caps.set("DATALOADER_SHM_BUS_ERROR", 0.3, "the SIGBUS was in NCCL's code, not in a DataLoader worker "
                     "(no DataLoader bus-error message)")
        return
