"""A rank held back by its CPU quota: its cgroup's throttled time against its peers', block by block.

A CFS bandwidth cap (cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, v2 `cpu.max`: Slurm's or an
admin's cgroup, `docker --cpus`, a Kubernetes `limits.cpu`) lets the cgroup run for its quota in every
period, then throttles it until the next one. The kernel counts that time in the cgroup's cpu.stat:
v1 `throttled_time` (ns), v2 `throttled_usec` (Documentation/scheduler/sched-bwc.rst "Statistics";
Documentation/admin-guide/cgroup-v2.rst "cpu.stat"): the time its runnable threads were held off a CPU by
the quota, summed over the CPUs it was throttled on, so it can exceed the wall time. A rank that gets less
CPU than it needs gets no *more* on-CPU time than its peers (the CPU CUSUM of watch/straggler.py cannot
see it) and its busy share (on a CPU + runnable: the throttled time counts in schedstat's run_delay here,
measured on this 6.18 kernel: a spinning process capped at 0.3 of a CPU read on-CPU 0.30 + waiting 0.70)
varies with the load as much as a +10 % lag moves it. Its throttled time does not: a cgroup whose quota
is never hit reads exactly 0, so a 5 s block's throttled share over its peers' is a measure with no
noise from the load at all.

CUSUM on x = its cgroup's throttled share over the block - the median of the other ranks' (those in other
cgroups; 0 for a block where their median is over PEERS_FREE: they are throttled too):
S = max(0, S + dt * (min(x, THR_CLIP) - THR_K)); named when S >= THR_H after >= THR_MIN_S, its
last block still throttled (x >= THR_K), and the samples over those seconds agree that the others wait for
it (watch/straggler.py SAMPLES_AGREE). A rank whose cgroup holds other ranks of the job is not judged here
(they are throttled together: the whole job in one capped cgroup slows every rank alike, no straggler).
"""
from __future__ import annotations

import os
import re
import statistics
from typing import Any, Mapping

THR_K = 0.02      # a block's throttled share above its peers' over this accumulates ... (never-hit quota: 0)
THR_H = 0.4       # ... to this many throttled seconds (a +10 % step via a cap: throttled 0.05-0.15 of the wall)
THR_CLIP = 0.5    # a block counts at most this much: one burst over the quota adds little
PEERS_FREE = 0.02  # the others' median throttled share under which a block counts (they run unthrottled)
THR_MIN_S = 20.0  # accumulated for this long, counted from the start of its first block (a 10 s burst is not an event)


def parse_cpu_stat(text: str) -> dict[str, int]:
    """cpu.stat of a v1 cpu controller (nr_periods, nr_throttled, throttled_time ns) or of a v2 cgroup
    (usage_usec ... nr_throttled, throttled_usec): `throttled_ns` and `nr_throttled` either way."""
    kv = {}
    for line in text.splitlines():
        k, _, v = line.strip().partition(" ")
        if v.strip().isdigit():
            kv[k] = int(v)
    out = {"nr_periods": kv.get("nr_periods", 0), "nr_throttled": kv.get("nr_throttled", 0)}
    out["throttled_ns"] = kv["throttled_time"] if "throttled_time" in kv else kv.get("throttled_usec", 0) * 1000
    return out


def parse_quota(v1_quota: str | None, v1_period: str | None, v2_max: str | None) -> tuple[int, int] | None:
    """(quota, period) in microseconds, or None when there is no quota: v1 cpu.cfs_quota_us is -1 when
    unlimited (sched-bwc.rst), v2 cpu.max is "$MAX $PERIOD" with "max" when unlimited (cgroup-v2.rst)."""
    try:
        if v2_max is not None:
            q, _, p = v2_max.strip().partition(" ")
            return None if q == "max" else (int(q), int(p or 100000))
        if v1_quota is not None and v1_period is not None:
            q = int(v1_quota.strip())
            return None if q < 0 else (q, int(v1_period.strip()))
    except ValueError:
        return None
    return None


def read_quota(cgdir: str) -> tuple[int, int] | None:
    def rd(name):
        try:
            with open(os.path.join(cgdir, name), encoding="utf-8") as f:
                return f.read(200)
        except OSError:
            return None
    v2 = rd("cpu.max")
    return parse_quota(rd("cpu.cfs_quota_us"), rd("cpu.cfs_period_us"), v2) if v2 is None else parse_quota(None, None, v2)


def who_sets(cgdir: str) -> str:
    """Where the quota comes from, when the cgroup's path shows it, and how to raise it."""
    m = re.search(r"/docker[-/]([0-9a-f]{12})[0-9a-f]*(?:\.scope)?(?:/|$)", cgdir)
    if m:
        return f"docker's --cpus of container {m.group(1)} (docker update --cpus N {m.group(1)})"
    if "kubepods" in cgdir:
        m = re.search(r"pod([0-9a-f_-]{36})", cgdir)
        pod = f" of pod {m.group(1).replace('_', '-')}" if m else ""
        return f"the container's resources.limits.cpu in Kubernetes{pod}"
    m = re.search(r"/job_(\d+)(?:/|$)", cgdir)
    if "slurm" in cgdir and m:
        return f"Slurm's cgroup of job {m.group(1)} (its cgroup.conf / the job's CPU allocation)"
    # cgroup v1: its quota file, or the v1 mount (/sys/fs/cgroup/cpu or cpu,cpuacct)
    if os.path.exists(os.path.join(cgdir, "cpu.cfs_quota_us")) or re.match(r"/sys/fs/cgroup/cpu[,/]", cgdir):
        return f"a quota set by hand (echo -1 > {cgdir}/cpu.cfs_quota_us lifts it)"
    return f"a quota set by hand (echo max > {cgdir}/cpu.max lifts it)"


MIN_SPAN_S = 0.5   # a share of a rank's time needs two ticks at least this far apart


def inside(ticks, a: float, b: float) -> list:
    """A rank's ticks (t, busy ns, delay ns, io, state, throttled ns, cgroup) from a to b."""
    return [x for x in ticks if a <= x[0] <= b]


def span(sel: list) -> tuple[tuple, tuple, float] | None:
    """(first tick, last tick, seconds between them) of a window of ticks; None without 2 ticks MIN_SPAN_S apart.
    Every share watch takes of a rank's time (on-CPU, waiting for a CPU, busy, throttled) is a counter's growth
    over this span (here, watch/corejudge.py, watch/straggler.py)."""
    if len(sel) < 2 or sel[-1][0] - sel[0][0] < MIN_SPAN_S:
        return None
    return sel[0], sel[-1], sel[-1][0] - sel[0][0]


def throttled_share(ticks, a: float, b: float) -> float | None:
    """A rank's cgroup's throttled ns over the wall time from a to b, over the ticks in its current cgroup only
    (a rank moved into a capped cgroup: the counters are the new cgroup's); None without 2 such ticks or without
    a cgroup."""
    sel = inside(ticks, a, b)
    if not sel or not sel[-1][6]:
        return None
    w = span([x for x in sel if x[6] == sel[-1][6]])
    if w is None:
        return None
    first, last, dt = w
    return max(0, last[5] - first[5]) / 1e9 / dt


def cusum_step(acc: list | None, x: float, dt: float, prev: float, clip: float, k: float) -> list:
    """One block of a one-sided CUSUM, S = max(0, S + dt * (min(x, clip) - k)): -> [S, since when it has
    accumulated] (a run that fell back to 0 starts again at this block, prev). Shared by this cap rule and
    watch/straggler.py's CPU rule."""
    carried, since = (acc if acc and acc[0] > 0 else (0.0, prev))
    return [max(0.0, carried + dt * (min(x, clip) - k)), since]


class CapCusum:
    def __init__(self):
        self.acc: dict[Any, list] = {}   # rank -> [throttled-seconds accumulated, since when]

    def clear(self):
        self.acc.clear()

    def update(self, prev: float, now: float, ticks: Mapping[Any, Any]) -> list[tuple[Any, float, float]]:
        """One block from prev to now: -> the ranks that reached the threshold, (rank, S, since when), for
        the caller to confirm with the samples. Ranks sharing a cgroup with another rank are not judged."""
        cg = {k: (tk[-1][6] if tk else "") for k, tk in ticks.items()}
        thr = {k: throttled_share(tk, prev - 0.5, now) for k, tk in ticks.items()}
        thr = {k: v for k, v in thr.items() if v is not None}
        self.acc = {k: v for k, v in self.acc.items() if k in thr}
        dt, out = now - prev, []
        for k, v in thr.items():
            if any(cg[j] == cg[k] for j in ticks if j != k):
                self.acc.pop(k, None)
                continue
            others = [o for j, o in thr.items() if j != k]
            if not others:
                continue
            # only while its peers are (all but) unthrottled: where every rank runs under a quota it reaches,
            # their throttled shares differ block to block by as much as a cap's (a random walk the CUSUM
            # would turn into an event): that job is left to the 40 s rule
            med = statistics.median(others)
            x = v - med if med <= PEERS_FREE else 0.0
            s, since = self.acc[k] = cusum_step(self.acc.get(k), x, dt, prev, THR_CLIP, THR_K)
            if s >= THR_H and now - since >= THR_MIN_S and x >= THR_K:
                out.append((k, s, since))
        return sorted(out, key=lambda r: -r[1])

    def excess(self, key, ticks: Mapping[Any, Any], a: float, b: float) -> float:
        """Its throttled share from a to b over the others' median (0 when unknown): still capped?"""
        thr = {k: throttled_share(tk, a, b) for k, tk in ticks.items()}
        others = [v for k, v in thr.items() if k != key and v is not None]
        if thr.get(key) is None or not others:
            return 0.0
        return thr[key] - statistics.median(others)


def cause(share: float, cgroup_stat_dir: str) -> str:
    """`throttled by its CPU quota: 12% of the time, quota 45 ms of period 100 ms (cgroup …); …`"""
    q = read_quota(cgroup_stat_dir) if cgroup_stat_dir else None
    quota = (f"quota {q[0] / 1000:g} ms of period {q[1] / 1000:g} ms ({q[0] / q[1]:.2f} CPU)" if q
             else "no quota now (lifted since?)")
    return (f"throttled by its CPU quota: {share:.0%} of the time, {quota} (cgroup {cgroup_stat_dir}); "
            f"the fix: raise it, {who_sets(cgroup_stat_dir)}")
