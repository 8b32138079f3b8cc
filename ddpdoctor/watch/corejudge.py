"""A rank held back by a busy core: its main thread waits for a CPU longer than its peers', block by block.

A rank that shares its core with other work (a process pinned to the CPU the rank is bound to by a
cpuset, `taskset` or Slurm's `--cpu-bind`; a CPU hog beside an unbound rank the scheduler does not move
away) gets no more on-CPU time than its peers (the CPU CUSUM of watch/straggler.py cannot see it) and no
throttled time (no quota: watch/capjudge.py cannot either): it *waits* for a CPU. schedstat counts that
wait per thread: /proc/<pid>/task/<tid>/schedstat's second field, run_delay, "time spent waiting on a
runqueue" (Documentation/scheduler/sched-stats.rst), read every second by watch/sample.py. The time it
waits more than its peers is time its step is longer, the lag itself in the same unit (seconds a second).

CUSUM on x = its delay share over a 5 s block - the median of the others' (the lost time, a share of the
wall time): S = max(0, S + dt * (min(x, CORE_CLIP) - CORE_K)); named when S >= CORE_H after >= CORE_MIN_S,
its last block still above CORE_K, its on-CPU time over those seconds not in excess (a rank with more work
also waits more in proportion on a loaded machine: that one is the CPU rule's, and its cause is not the
core), and the samples over those seconds agreeing that the others wait for it (straggler.py SAMPLES_AGREE).
The noise it holds against is the load: on 2 cores at load 5-22 a healthy rank's block x has sd 0.08-0.12
(one rank gets the cores for a while), chosen by replaying recorded traces (docs/watch.md "A busy core").

Which other process shares its CPU comes from watch/corescan.py (two /proc scans 10 s apart, made on the
rank's node while it waits for a CPU); the cause names one only when /proc backs it: the rank stayed on
one CPU over both scans, and either the process may run only on that CPU or the rank may (bound by a
cpuset or taskset) and the process sat on it at both scans; otherwise "unknown" and why.
"""
from __future__ import annotations

import statistics
from typing import Any, Mapping

from ddpdoctor.watch.capjudge import cusum_step, inside, span, throttled_share

CORE_K = 0.10      # a block's delay share above the others' median over this accumulates ... (the healthy traces,
                   # 57 min at load 1-22: at most 2.8 s at 0.10, 2.6 at 0.12, 2.3 at 0.15); x is the lag itself
                   # (the extra wait is the step's extra time): live at load 20 a bound rank lagged 0.18, which at
                   # 0.15 took 107 s to add up
CORE_H = 3.5       # ... to this many seconds of extra waiting (a bound rank beside a hog at load 13: +0.20-0.38 a
                   # block, named 30 s after the onset)
CORE_CLIP = 0.5    # a block counts at most this much: one rank starved by a burst adds little
CORE_MIN_S = 30.0  # accumulated this long (healthy ranks starved by the load for up to 35 s: 20 s named them sooner
                   # but left no margin for those transients)
RUN_EXCESS = 0.12  # its on-CPU time over the others' median above this, minus 1: more work, not a busy core
NEAR_MIN = 0.3     # a process sharing its CPU is named when it used at least this share of that CPU


def _shares(ticks, a: float, b: float) -> tuple[float, float] | None:
    """(delay share, on-CPU share) of a rank's main thread from a to b (ticks: (t, busy ns, delay ns, ...))."""
    w = span(inside(ticks, a, b))
    if w is None:
        return None
    first, last, dt = w
    return max(0, last[2] - first[2]) / 1e9 / dt, max(0, (last[1] - last[2]) - (first[1] - first[2])) / 1e9 / dt


def on_cpu(ticks, a: float, b: float) -> float | None:
    """A rank's on-CPU share from a to b (busy ns less the ns it waited for a CPU: what watch/straggler.py's CPU
    CUSUM compares); None without 2 ticks half a second apart."""
    sh = _shares(ticks, a, b)
    return None if sh is None else sh[1]


def delay_share(ticks, a: float, b: float) -> float:
    """Its main thread's delay share from a to b (0 when unknown): how much of the time it waited for a CPU."""
    return (_shares(ticks, a, b) or (0.0, 0.0))[0]


def excess(key, ticks: Mapping[Any, Any], a: float, b: float) -> tuple[float, float]:
    """(its delay share - the others' median, its on-CPU share / the others' median - 1) from a to b; 0s
    when unknown."""
    sh = {k: _shares(tk, a, b) for k, tk in ticks.items()}
    others = [v for k, v in sh.items() if k != key and v is not None]
    if sh.get(key) is None or not others:
        return 0.0, 0.0
    d, r = sh[key]
    med_run = statistics.median(o[1] for o in others)
    return d - statistics.median(o[0] for o in others), (r / med_run - 1 if med_run > 0.005 else 0.0)


def busy_core(key, ticks: Mapping[Any, Any], a: float, b: float) -> bool:
    """From a to b it waited for a CPU CORE_K more than the others' median and was not on a CPU more: the
    cause of a straggler named otherwise (the 40 s rule) is its core."""
    d, r = excess(key, ticks, a, b)
    return d >= CORE_K and r < RUN_EXCESS


class CoreCusum:
    def __init__(self):
        self.acc: dict[Any, list] = {}   # rank -> [extra seconds of waiting accumulated, since when]

    def clear(self):
        self.acc.clear()

    def update(self, prev: float, now: float, ticks: Mapping[Any, Any]) -> list[tuple[Any, float, float]]:
        """One block from prev to now: -> the ranks that reached the threshold, (rank, S, since when), the
        most accumulated first, for the caller to confirm with the samples."""
        sh = {k: _shares(tk, prev - 0.5, now) for k, tk in ticks.items()}
        sh = {k: v for k, v in sh.items() if v is not None}
        self.acc = {k: v for k, v in self.acc.items() if k in sh}
        if len(sh) < 2:
            return []
        dt, out = now - prev, []
        thr = {k: throttled_share(ticks[k], prev - 0.5, now) or 0.0 for k in sh}
        for k, (d, _) in sh.items():
            # a CPU quota's throttling counts in run_delay too: that part is capjudge.py's
            x = d - statistics.median(v[0] for j, v in sh.items() if j != k) \
                - max(0.0, thr[k] - statistics.median(v for j, v in thr.items() if j != k))
            s, since = self.acc[k] = cusum_step(self.acc.get(k), x, dt, prev, CORE_CLIP, CORE_K)
            if s >= CORE_H and now - since >= CORE_MIN_S and x >= CORE_K \
                    and excess(k, ticks, since, now)[1] < RUN_EXCESS:
                out.append((k, s, since))
        return sorted(out, key=lambda r: -r[1])


def cause(delay: float, core: Mapping[str, Any] | None) -> str:
    """`waiting for a CPU 34% of the time (a busy core): CPU 1, …` with the processes that share it when
    /proc backs it (watch/corescan.py's last scans of its node), else `unknown` and why."""
    head = f"waiting for a CPU {delay:.0%} of the time (a busy core)"
    if not core:
        return head + "; which process shares its CPU: unknown (no scan of its node's processes yet)"
    cpu, cpus, near = core.get("cpu"), core.get("cpus") or [], core.get("near")
    bound = cpus == [cpu]
    where = f"CPU {cpu}" + (", the only one it may run on (its affinity: a cpuset, taskset or --cpu-bind)" if bound else "")
    if near is None:
        return f"{head}: {where}; which process shares it: unknown (it moved between CPUs over the last {core.get('span', 0):g} s)"
    busy = [p for p in near if p[2] >= NEAR_MIN]
    backed = [p for p in busy if p[3] or bound]
    if not backed:
        why = (f"pid {busy[0][0]} ({busy[0][1]}) was on it at both scans, {busy[0][2]:.0%} of it, but neither is "
               "bound to it" if busy else f"no other process used {NEAR_MIN:.0%} of it at both scans")
        return f"{head}: {where}; which process shares it: unknown ({why}, over {core.get('span', 0):g} s)"
    return (f"{head}: {where}; over {core.get('span', 0):g} s it shared it with "
            + ", ".join(f"pid {p[0]} ({p[1]}{', bound to it' if p[3] else ''}) {p[2]:.0%} of it" for p in backed))
