"""A process's Python stacks, read from outside with py-spy (https://github.com/benfred/py-spy).

`py-spy dump --nonblocking --json` reads the interpreter's memory through process_vm_readv
without pausing the process (py-spy's --nonblocking: "Don't pause the python process"), so the
job keeps running exactly as it was. It needs ptrace rights over the target (root, CAP_SYS_PTRACE,
or kernel.yama.ptrace_scope=0 for a process of the same user). Each dump runs in its own
subprocess with a timeout; many run in parallel.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

PTRACE_HELP = ("py-spy needs ptrace rights over the job's processes: run as root or as the job's user with "
               "`sudo sysctl kernel.yama.ptrace_scope=0`, or give py-spy CAP_SYS_PTRACE "
               "(`sudo setcap cap_sys_ptrace+ep $(which py-spy)`; in docker: --cap-add SYS_PTRACE)")


@dataclass(frozen=True)
class Frame:
    name: str
    file: str        # short filename as py-spy shows it (package-relative)
    path: str        # full path
    line: int


@dataclass(frozen=True)
class Thread:
    tid: int
    name: str
    active: bool
    frames: tuple[Frame, ...]  # innermost first


@dataclass(frozen=True)
class Dump:
    pid: int
    ok: bool
    threads: tuple[Thread, ...] = ()
    error: str = ""
    kind: str = ""   # "", "permission", "gone", "timeout", "missing", "other"
    took_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def main_thread(self) -> Thread | None:
        for t in self.threads:
            if t.tid == self.pid:
                return t
        for t in self.threads:
            if t.name == "MainThread":
                return t
        return self.threads[0] if self.threads else None


def binary() -> str | None:
    """py-spy's binary: DDPDOCTOR_PYSPY (a site's own build), next to this interpreter (a pip install),
    or on PATH."""
    named = os.environ.get("DDPDOCTOR_PYSPY")
    if named:
        return named if os.access(named, os.X_OK) else None
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


def parse(pid: int, text: str) -> tuple[Thread, ...]:
    threads = []
    for t in json.loads(text):
        frames = tuple(Frame(f.get("name") or "?", f.get("short_filename") or f.get("filename") or "?",
                             f.get("filename") or "?", int(f.get("line") or 0)) for f in t.get("frames") or [])
        threads.append(Thread(int(t.get("os_thread_id") or t.get("thread_id") or 0), t.get("thread_name") or "",
                              bool(t.get("active")), frames))
    return tuple(threads)


def _classify_error(err: str) -> str:
    low = err.lower()
    if "permission" in low or "operation not permitted" in low:
        return "permission"
    if "no such process" in low or "failed to find python" in low or "not found" in low:
        return "gone"
    return "other"


def dump(pid: int, timeout: float = 3.0, exe: str | None = None) -> Dump:
    exe = exe or binary()
    if not exe:
        return Dump(pid, False, error="py-spy is not installed (pip install py-spy)", kind="missing")
    t0 = time.monotonic()
    try:
        p = subprocess.run([exe, "dump", "--pid", str(pid), "--nonblocking", "--json"], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Dump(pid, False, error=f"py-spy did not answer in {timeout:g} s", kind="timeout",
                    took_s=time.monotonic() - t0)
    took = time.monotonic() - t0
    if p.returncode != 0:
        err = (p.stderr or p.stdout).strip().splitlines()
        msg = err[-1] if err else f"py-spy exit {p.returncode}"
        if not os.path.exists(f"/proc/{pid}"):
            return Dump(pid, False, error="process exited", kind="gone", took_s=took)
        return Dump(pid, False, error=msg[:300], kind=_classify_error(" ".join(err)), took_s=took)
    try:
        return Dump(pid, True, parse(pid, p.stdout), took_s=took)
    except (ValueError, TypeError, KeyError) as e:
        return Dump(pid, False, error=f"unreadable py-spy output: {e}", kind="other", took_s=took)


def dump_all(pids: list[int], timeout: float = 3.0) -> dict[int, Dump]:
    """Every pid's dump, all at once (a dump takes ~10 ms of py-spy's own time, most of it start-up)."""
    if not pids:
        return {}
    exe = binary()
    with ThreadPoolExecutor(max_workers=min(32, len(pids))) as ex:
        futs = {pid: ex.submit(dump, pid, timeout, exe) for pid in pids}
        return {pid: f.result() for pid, f in futs.items()}
