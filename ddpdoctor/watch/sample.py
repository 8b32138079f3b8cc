"""What `watch` reads about a rank, and how cheaply: /proc every second, py-spy stacks less often.

Per rank, every tick (≈1 s), from /proc only (≈0.1 ms a rank, cgroup cpu.stat included):
- state letter (R S D T Z) from /proc/<pid>/stat;
- the main thread's schedstat (/proc/<pid>/task/<pid>/schedstat, Documentation/scheduler/sched-stats.rst):
  nanoseconds on a CPU and nanoseconds runnable but waiting for one. Their sum over the wall time is
  the share of time the main thread did not sleep: a rank blocked in a Gloo wait (ProcessGroupGloo's
  work.wait() sleeps on a condition variable) adds nothing, a rank throttled by a CPU cap keeps adding
  (throttled time counts as waiting for a CPU);
- the whole process's CPU ticks and I/O counters (/proc/<pid>/io rchar+wchar: read/write on sockets and
  files), which move while a rank reads data or talks to its peers.
Stacks: `py-spy dump --nonblocking` (probes/pyspy.py) of the main thread costs ≈23 ms of CPU (measured
with torch loaded, beside a 2-rank job): at one dump per rank every 30 s while every rank moves (watch/observe.py)
that is 0.08 % of a core per rank.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.inspect.where import locate, signature
from ddpdoctor.probes import pyspy
from ddpdoctor.watch.capjudge import parse_cpu_stat


@dataclass(frozen=True)
class ProcTick:
    pid: int
    t: float                 # time.monotonic() of the read
    state: str               # R S D T Z ... or "gone"
    run_ns: int = 0          # main thread: on a CPU
    delay_ns: int = 0        # main thread: runnable, waiting for a CPU (a CPU cap's throttling included)
    cpu_ticks: int = 0       # whole process utime+stime
    io_bytes: int = 0        # whole process rchar+wchar
    exit_code: int | None = None  # wait status, readable while the process is a zombie (proc(5) field 52)
    cpu: int = -1            # the CPU its main thread last ran on (proc(5) field 39, processor)


def _read(path: str) -> str | None:
    """A small /proc or cgroup file, with plain os.open/os.read: half the CPU of open() (its buffered text
    layer is most of the cost of reading a 300-byte file: 0.16 -> 0.08 ms a rank a tick, four files)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        parts = [os.read(fd, 65536)]
        while len(parts[-1]) == 65536:   # a seq_file read fills the buffer: one read unless it is larger
            parts.append(os.read(fd, 65536))
        return b"".join(parts).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def cpu_stat_path(pid: int) -> str | None:
    """The cpu.stat of the process's CPU cgroup: v1 (/sys/fs/cgroup/cpu/<path>, throttled_time in ns) or
    v2 (/sys/fs/cgroup/<path>, throttled_usec). A CPU cap shows there as throttled time."""
    txt = _read(f"/proc/{pid}/cgroup") or ""
    for line in txt.splitlines():
        _, ctrls, path = line.split(":", 2)
        if "cpu" in ctrls.split(","):
            for base in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
                if os.path.exists(f"{base}{path}/cpu.stat"):
                    return f"{base}{path}/cpu.stat"
        if ctrls == "" and os.path.exists(f"/sys/fs/cgroup{path}/cpu.stat"):
            return f"/sys/fs/cgroup{path}/cpu.stat"
    return None


def throttled_ns(path: str | None) -> int:
    """The cgroup's throttled time in ns (v1 throttled_time, v2 throttled_usec: watch/capjudge.py)."""
    txt = _read(path) if path else None
    return parse_cpu_stat(txt)["throttled_ns"] if txt else 0


def proc_tick(pid: int, now: float | None = None) -> ProcTick:
    now = time.monotonic() if now is None else now
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return ProcTick(pid, now, "gone")
    rest = stat[stat.rfind(")") + 2:].split()  # comm may hold spaces and parentheses
    state = rest[0]
    exit_code = int(rest[49]) if state in ("Z", "X") and len(rest) > 49 else None
    run = delay = 0
    ss = _read(f"/proc/{pid}/task/{pid}/schedstat")
    if ss:
        parts = ss.split()
        run, delay = int(parts[0]), int(parts[1])
    io = 0
    txt = _read(f"/proc/{pid}/io")
    if txt:
        for line in txt.splitlines():
            k, _, v = line.partition(":")
            if k in ("rchar", "wchar"):
                io += int(v)
    return ProcTick(pid, now, state, run, delay, int(rest[11]) + int(rest[12]), io, exit_code,
                    int(rest[36]) if len(rest) > 36 else -1)


@dataclass(frozen=True)
class StackSample:
    pid: int
    t: float
    ok: bool
    where: dict[str, Any] = field(default_factory=dict)   # inspect/where.py locate() of the main thread
    inner: dict[str, Any] = field(default_factory=dict)   # its innermost frame in user code (innermost_user)
    signature: tuple = ()
    active: bool = False      # py-spy: the thread was running (not blocked in a syscall)
    error: str = ""
    kind: str = ""            # py-spy's failure kind: permission, gone, timeout, missing, other


def innermost_user(thread) -> dict[str, Any]:
    """Where a helper process (a DataLoader worker) is: its innermost frame outside torch and the standard
    library (`__getitem__ data.py:88`), not the line its parent forked it at."""
    for f in (thread.frames if thread else ()):
        if f.file.startswith(("torch/", "<")) or "/site-packages/torch/" in f.path:
            continue
        if "/lib/python3" in f.path and "-packages/" not in f.path:
            continue
        return {"kind": "python", "call": f.name, "file": f.file, "line": f.line, "func": f.name,
                "active": thread.active}
    return locate(thread)


def stacks(pids: list[int], timeout: float = 3.0, helpers: frozenset[int] | set[int] = frozenset()
           ) -> dict[int, StackSample]:
    """One main-thread sample per pid, all at once (py-spy --nonblocking: the process is never paused).
    For `helpers` (DataLoader workers) `where` is the innermost user frame."""
    now = time.monotonic()
    out = {}
    for pid, d in pyspy.dump_all(pids, timeout).items():
        if not d.ok:
            out[pid] = StackSample(pid, now, False, error=d.error, kind=d.kind)
            continue
        main = d.main_thread()
        inner = innermost_user(main)
        where = inner if pid in helpers else locate(main)
        out[pid] = StackSample(pid, now, True, where, inner, signature(main), bool(main and main.active))
    return out


class ExitWatch:
    """Exit status of processes we did not start, caught the moment they die.

    A pidfd (pidfd_open(2), Linux 5.3) becomes readable when its process exits; the process is then a
    zombie until its parent reaps it (torchrun polls its workers every --monitor-interval, 0.1 s by
    default), and /proc/<pid>/stat field 52 holds its wait status. Polling all pidfds in a thread reads
    it within microseconds of the exit. Without pidfds (old kernel) the status is read when a tick
    happens to see the zombie, else it is unknown.
    """

    def __init__(self):
        import select
        import threading
        self._select = select
        self._fds: dict[int, int] = {}
        self.codes: dict[int, int | None] = {}
        self.when: dict[int, float] = {}   # time.monotonic() the exit was seen: who died first
        self._lock = threading.Lock()
        self._r, self._w = os.pipe()
        self._stop = False
        self._th = threading.Thread(target=self._loop, daemon=True, name="ddpdoctor-exitwatch")
        self._th.start()

    def add(self, pid: int) -> None:
        if not hasattr(os, "pidfd_open"):
            return
        with self._lock:
            if pid in self._fds or pid in self.codes:
                return
            try:
                self._fds[pid] = os.pidfd_open(pid)
            except OSError:
                return
        os.write(self._w, b"x")

    def _loop(self):
        while not self._stop:
            p = self._select.poll()
            p.register(self._r, self._select.POLLIN)
            with self._lock:
                for fd in self._fds.values():
                    p.register(fd, self._select.POLLIN)
            ready = {fd for fd, _ in p.poll()}   # add() and close() wake it through the pipe
            if self._r in ready:
                os.read(self._r, 4096)
            with self._lock:
                for pid, fd in list(self._fds.items()):
                    if fd in ready:
                        self.codes[pid] = proc_tick(pid).exit_code
                        self.when[pid] = time.monotonic()
                        os.close(fd)
                        del self._fds[pid]

    def close(self):
        self._stop = True
        os.write(self._w, b"x")
        self._th.join(2)
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
        os.close(self._r)
        os.close(self._w)


def describe_exit(status: int | None) -> str:
    """A wait status as a person reads it: `exit code 1`, `killed by SIGKILL`."""
    if status is None:
        return "exit status unknown (reaped before it could be read)"
    import signal
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    if os.WIFEXITED(status):
        return f"exit code {os.WEXITSTATUS(status)}"
    return f"wait status {status}"


def qdiscs(timeout: float = 2.0) -> dict[str, dict[str, Any]] | None:
    """This node's egress queueing disciplines that can hold packets back (a rate limit), per device:
    {dev: {kind, overlimits, drops, backlog, bytes}} from `tc -s -j qdisc show` (iproute2's JSON,
    tc-s(8); the kernel's gnet_stats_basic/queue counters). `overlimits` grows each time a shaper
    (tbf, htb, hfsc, cake...) had to delay a packet for want of tokens: a node whose outgoing traffic is
    rate-limited shows it there while its peers wait for its data. Queue-only disciplines (noqueue,
    pfifo_fast, fq_codel, mq) are left out. None when neither netlink nor `tc` answers.
    Read over rtnetlink, as `tc` itself does (≈0.1 ms), not by running `tc` (≈4 ms of CPU a run, every 5 s:
    0.08 % of a core a node); `tc` only where netlink is refused."""
    rows = netlink_qdiscs(timeout)
    if rows is None:
        rows = _tc_qdiscs(timeout)
    if rows is None:
        return None
    out: dict[str, dict[str, Any]] = {}
    for q in rows if isinstance(rows, list) else []:
        if not isinstance(q, dict) or q.get("kind") not in SHAPERS or q.get("dev") == "lo":
            continue
        dev = str(q.get("dev"))
        prev = out.get(dev)
        rate = (q.get("options") or {}).get("rate") if isinstance(q.get("options"), dict) else None
        row = {"kind": q["kind"], "rate": int(rate) if isinstance(rate, (int, float)) else None,
               "overlimits": int(q.get("overlimits") or 0), "drops": int(q.get("drops") or 0),
               "backlog": int(q.get("backlog") or 0), "bytes": int(q.get("bytes") or 0)}
        if prev is None or q.get("root"):
            out[dev] = row
    return out


SHAPERS = frozenset({"tbf", "htb", "hfsc", "cbq", "cake", "netem"})   # disciplines that delay for a rate


def _tc_qdiscs(timeout: float) -> list | None:
    import json
    import shutil
    import subprocess
    exe = shutil.which("tc") or next((p for p in ("/usr/sbin/tc", "/sbin/tc") if os.path.exists(p)), None)
    if exe is None:
        return None
    try:
        p = subprocess.run([exe, "-s", "-j", "qdisc", "show"], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        rows = json.loads(p.stdout) if p.returncode == 0 and p.stdout.strip() else []
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return rows if isinstance(rows, list) else []


# rtnetlink (linux/rtnetlink.h, linux/pkt_sched.h, linux/gen_stats.h): what `tc -s qdisc show` asks the kernel
_RTM_NEWQDISC, _RTM_GETQDISC = 36, 38
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCA_KIND, _TCA_OPTIONS, _TCA_STATS, _TCA_STATS2 = 1, 2, 3, 7
_TCA_STATS_BASIC, _TCA_STATS_QUEUE = 1, 3
_TCA_TBF_PARMS, _TCA_TBF_RATE64 = 1, 4
_TC_H_ROOT = 0xFFFFFFFF


def _attrs(buf: bytes, off: int, end: int) -> dict[int, bytes]:
    import struct
    out = {}
    while off + 4 <= end:
        ln, typ = struct.unpack_from("=HH", buf, off)
        if ln < 4 or off + ln > end:
            break
        out[typ & 0x3FFF] = buf[off + 4:off + ln]   # NLA_F_NESTED / NET_BYTEORDER bits off
        off += (ln + 3) & ~3
    return out


def netlink_qdiscs(timeout: float = 2.0) -> list[dict[str, Any]] | None:
    """Every qdisc of this network namespace as `tc -s -j qdisc show` gives it (the fields qdiscs() reads:
    dev, kind, root, options.rate (tbf, bytes/s), bytes, drops, overlimits, backlog), from one RTM_GETQDISC
    dump. None if the socket is refused or the dump fails (qdiscs() then runs `tc`)."""
    import socket
    import struct
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    except (OSError, AttributeError):
        return None
    rows: list[dict[str, Any]] = []
    try:
        s.settimeout(timeout)
        s.bind((0, 0))
        seq = int(time.monotonic() * 1000) & 0x7FFFFFFF
        tcmsg = struct.pack("=BBHiIII", socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0)
        s.send(struct.pack("=IHHII", 16 + len(tcmsg), _RTM_GETQDISC, _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0) + tcmsg)
        names: dict[int, str] = {}
        while True:
            buf = s.recv(1 << 16)
            if not buf:
                return None
            off = 0
            while off + 16 <= len(buf):
                ln, typ, _flags, mseq, _pid = struct.unpack_from("=IHHII", buf, off)
                if ln < 16 or off + ln > len(buf):
                    return None
                if mseq == seq:
                    if typ == _NLMSG_DONE:
                        return rows
                    if typ == _NLMSG_ERROR:
                        return None
                    if typ == _RTM_NEWQDISC and ln >= 36:
                        rows.append(_qdisc_row(buf, off + 16, off + ln, names))
                off += (ln + 3) & ~3
    except (OSError, struct.error, ValueError):
        return None
    finally:
        s.close()


def _qdisc_row(buf: bytes, off: int, end: int, names: dict[int, str]) -> dict[str, Any]:
    import socket
    import struct
    _fam, _p1, _p2, ifindex, _handle, parent, _info = struct.unpack_from("=BBHiIII", buf, off)
    if ifindex not in names:
        try:
            names[ifindex] = socket.if_indextoname(ifindex)
        except OSError:
            names[ifindex] = str(ifindex)
    a = _attrs(buf, off + 20, end)
    row: dict[str, Any] = {"kind": a.get(_TCA_KIND, b"").split(b"\0", 1)[0].decode("ascii", "replace"),
                           "dev": names[ifindex], "root": parent == _TC_H_ROOT}
    if row["kind"] == "tbf" and _TCA_OPTIONS in a:
        o = _attrs(a[_TCA_OPTIONS], 0, len(a[_TCA_OPTIONS]))
        if len(o.get(_TCA_TBF_RATE64, b"")) >= 8:
            row["options"] = {"rate": struct.unpack_from("=Q", o[_TCA_TBF_RATE64])[0]}
        elif len(o.get(_TCA_TBF_PARMS, b"")) >= 12:   # struct tc_tbf_qopt: rate (tc_ratespec), its .rate at 8
            row["options"] = {"rate": struct.unpack_from("=I", o[_TCA_TBF_PARMS], 8)[0]}
    st = _attrs(a[_TCA_STATS2], 0, len(a[_TCA_STATS2])) if _TCA_STATS2 in a else {}
    if len(st.get(_TCA_STATS_BASIC, b"")) >= 12:      # struct gnet_stats_basic: bytes u64, packets u32
        row["bytes"] = struct.unpack_from("=Q", st[_TCA_STATS_BASIC])[0]
    if len(st.get(_TCA_STATS_QUEUE, b"")) >= 20:      # struct gnet_stats_queue: qlen backlog drops requeues overlimits
        _qlen, row["backlog"], row["drops"], _req, row["overlimits"] = struct.unpack_from("=5I", st[_TCA_STATS_QUEUE])
    elif len(a.get(_TCA_STATS, b"")) >= 36:          # old kernels: struct tc_stats
        row["bytes"], _pk, row["drops"], row["overlimits"], _bps, _pps, _ql, row["backlog"] = \
            struct.unpack_from("=QIIIIIII", a[_TCA_STATS])
    return row
