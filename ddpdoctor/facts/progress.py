"""Is a rank making progress? Judged by counters that move, never by two stacks that look alike.

A rank looping on small all_reduces (hundreds a second) spends most of its time inside the collective:
two stack samples a second apart land in the same `all_reduce` line most of the time, though the job
runs. What tells a hung rank from a busy one is what keeps moving between two looks:

- the collective sequence number (the flight recorder / torch's debug server, when the job is armed):
  it advanced -> collectives complete;
- the stack changed;
- the main thread's voluntary context switches (/proc/<pid>/task/<pid>/status): a main thread waiting in
  a collective sleeps in one futex/recv until the collective completes (torch's Work::wait on a condition
  variable, c10d ProcessGroupGloo), so each completed wait is a wakeup. A hung rank's main thread does not
  wake: 0 in the lab (tests/test_inspect_progress_lab.py), hundreds a second in a healthy loop;
- the process's read/write system calls (/proc/<pid>/io syscr+syscw): Gloo moves data with read/writev on
  its sockets (gloo/transport/tcp/pair.cc), so a large collective that keeps the main thread blocked for
  the whole interval still moves these;
- main-thread CPU time: a rank computing at one line (a long C call) uses a core.
The observer must not count itself: a rank whose debug server we asked for stacks or its flight recorder
read and wrote sockets for us, so its system calls are left out (syscalls None) for that look.
When none of these can be read (no permission, one stack unreadable), the verdict is "unknown" with what
would decide it, never "hung".

API (used by `inspect` and `watch`):
    a = look(pid, signature=sig, in_collective=True)      # one look (reads /proc)
    ... later ...
    b = look(pid, signature=sig2, in_collective=True, seq=fr_seq)
    p = judge(between(a, b))   # Progress(verdict="moving"|"still"|"unknown", why, decide, motion)
`between` and `judge` are pure: tests and `watch` feed them plain Looks.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

MOVING, STILL, UNKNOWN = "moving", "still", "unknown"
# Below this share of one core a main thread at one line is waiting, not computing.
IDLE_CPU = 0.2
# Wakeups of the main thread in one interval that mean its waits complete (a hung one has 0).
WOKE = 3
# read/write system calls per second of the whole process that mean the backend moves data.
BUSY_SYSCALLS = 20.0
# Shorter than this between two looks, nothing is judged "still": too little time for a slow step.
MIN_SECONDS = 0.3


@dataclass(frozen=True)
class Look:
    """One look at one rank: where its main thread is, and counters that grow while it works."""
    t: float                           # time.monotonic()
    signature: tuple | None = None     # the whole main-thread stack (inspect/where.py), None when unreadable
    in_collective: bool | None = None  # inside a torch.distributed call
    main_ticks: int | None = None      # main-thread CPU clock ticks
    wakeups: int | None = None         # main thread's voluntary context switches
    syscalls: int | None = None        # read/write-family system calls of the process
    seq: int | None = None             # last collective sequence number entered/completed (armed jobs)
    state: str = ""                    # /proc state letter


@dataclass(frozen=True)
class Motion:
    """What moved between two looks at one rank (None: not known)."""
    seconds: float
    stack_changed: bool | None = None
    in_collective: bool | None = None
    main_cpu: float | None = None          # share of one core
    wakeups: int | None = None
    syscalls_per_s: float | None = None
    collectives: int | None = None         # sequence numbers advanced
    driver: tuple | None = None            # (samples in libcuda.so, samples elsewhere) of its main thread's CPU

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Progress:
    verdict: str            # MOVING | STILL | UNKNOWN
    why: str
    decide: str = ""        # for UNKNOWN: what would decide it
    motion: Motion | None = None


def look(pid: int, *, signature: tuple | None = None, in_collective: bool | None = None, seq: int | None = None,
         root: str = "/proc") -> Look:
    from ddpdoctor.probes import proctable
    a = proctable.activity(pid, root)
    st = proctable.read_stat(pid, root)
    return Look(time.monotonic(), signature, in_collective, a.main_ticks, a.main_wakeups, a.syscalls, seq,
                st[0] if st else "gone")


def _delta(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(0, b - a)


def between(a: Look, b: Look, hz: int | None = None) -> Motion:
    hz = hz or os.sysconf("SC_CLK_TCK")
    dt = max(b.t - a.t, 1e-3)
    ticks = _delta(a.main_ticks, b.main_ticks)
    sysc = _delta(a.syscalls, b.syscalls)
    changed = None if a.signature is None or b.signature is None else a.signature != b.signature
    return Motion(round(dt, 3), changed, b.in_collective, None if ticks is None else round(ticks / hz / dt, 3),
                  _delta(a.wakeups, b.wakeups), None if sysc is None else round(sysc / dt, 1), _delta(a.seq, b.seq))


def judge(m: Motion) -> Progress:
    """moving when something moved; still when every counter was read and none moved; else unknown."""
    if m.collectives:
        return Progress(MOVING, f"{m.collectives} collective(s) completed in {m.seconds:.1f} s", motion=m)
    if m.stack_changed:
        return Progress(MOVING, "its stack changed between the samples", motion=m)
    if m.wakeups is not None and m.wakeups >= WOKE:
        return Progress(MOVING, f"same line, but its main thread woke {m.wakeups} times in {m.seconds:.1f} s: "
                                "its waits complete", motion=m)
    if m.syscalls_per_s is not None and m.syscalls_per_s >= BUSY_SYSCALLS:
        return Progress(MOVING, f"same line, but it moves data ({m.syscalls_per_s:.0f} reads/writes a second)",
                        motion=m)
    gpu = _gpu_wait(m)
    if gpu is not None:
        return gpu
    if m.main_cpu is not None and m.main_cpu >= IDLE_CPU and not m.in_collective:
        return Progress(MOVING, f"same line but computing ({m.main_cpu:.0%} CPU)", motion=m)
    if m.stack_changed is None:
        return Progress(UNKNOWN, "a stack sample is missing and nothing else moved",
                        decide="inspect again: two readable stacks, or a job armed for the flight recorder", motion=m)
    if m.main_cpu is None:
        return Progress(UNKNOWN, "same stack in both samples; its CPU time is not readable",
                        decide="run as root or as the job's user (to read /proc/<pid>), or inspect with a longer "
                               "--interval", motion=m)
    if m.main_cpu >= IDLE_CPU:  # in a collective and spinning: a busy-wait, or a collective moving data in C
        return Progress(UNKNOWN, f"same collective, main thread busy ({m.main_cpu:.0%} CPU) without waking",
                        decide="the flight recorder's sequence numbers (`ddpdoctor arm`, then --debug-server or "
                               "the dumps) tell a spinning wait from completing collectives", motion=m)
    if m.seconds < MIN_SECONDS:
        return Progress(UNKNOWN, f"only {m.seconds:.2f} s between the samples", decide="a longer --interval", motion=m)
    extra = "" if m.wakeups is None else f", its main thread never woke"
    return Progress(STILL, f"same stack in both samples, {m.main_cpu:.0%} CPU{extra}", motion=m)


GPU_WAIT_S = 6.0        # watch/gpuwait.py's window: shorter, a healthy step's device sync may last that long
DRIVER_SAMPLES = 50     # perf samples of its CPU time (1 a ms) all in the driver


def _gpu_wait(m: Motion) -> Progress | None:
    """The same line, its main thread busy, and every sample of its CPU time in the CUDA driver (perf events,
    probes/ipsample.py): it spins in a device sync (`.item()`, synchronize, a D2H copy: CUDA's default
    schedule spins), it does not compute. Over GPU_WAIT_S that is a wait on its GPU; shorter, a healthy
    step's sync may last that long: unknown, with what decides."""
    if m.stack_changed or m.in_collective or not m.driver or m.main_cpu is None or m.main_cpu < IDLE_CPU:
        return None
    drv, other = m.driver
    if other or drv < DRIVER_SAMPLES:
        return None
    why = (f"same line, its main thread spins in the CUDA driver ({m.main_cpu:.0%} CPU, {drv} samples all in "
           f"libcuda.so, none elsewhere) for {m.seconds:.1f} s: it waits on its GPU")
    if m.seconds >= GPU_WAIT_S:
        return Progress(STILL, why + " (a kernel that does not end, or an NCCL collective that does not complete)",
                        motion=m)
    return Progress(UNKNOWN, why + ", or a healthy step syncs that long",
                    decide=f"inspect with --interval {GPU_WAIT_S:g} (or `ddpdoctor watch`): a wait that long is a hang",
                    motion=m)
