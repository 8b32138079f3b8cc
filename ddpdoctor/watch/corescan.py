"""Who else runs on a rank's CPU: the facts behind "waiting for a CPU (a busy core)", from /proc alone.

A rank that waits for a CPU more than its peers, without more work and without a CPU quota, shares its
core with something: another process pinned there (a stray job, a rank of another job bound to the same
core by a cpuset or `srun --cpu-bind`), or a core the rank itself is bound to while others load it. What
/proc shows, and how far it goes:
- the CPU a thread last ran on: proc(5) /proc/<pid>/stat field 39 `processor` (of the thread-group
  leader: the main thread of a rank, the leader of any other process);
- the CPUs a thread may run on: sched_getaffinity(2) (a cpuset, taskset, Slurm's --cpu-bind);
- each process's CPU time: stat fields 14-15 (utime, stime, clock ticks, all its threads).
(probes/proctable.py reads them: `cpu_table`, `affinity`; this module only judges what two scans show.)
Two scans SCAN_EVERY_S apart give each process's share of a core between them; a process *shares the
rank's CPU* when its leader sat on that CPU at both scans (or may run only there), and the rank's main
thread did too. One scan reads ≈300 small files: 2-5 ms of CPU here, so it runs only while some rank
waits for a CPU (observe.py), at most every SCAN_EVERY_S.
"""
from __future__ import annotations

from ddpdoctor.probes.proctable import TCK as _TCK, affinity, cpu_table as scan, uptime

SCAN_EVERY_S = 10.0
SCAN_DELAY = 0.10      # a rank's main thread waited for a CPU at least this share of the last seconds: scan
NEAR_TOP = 3           # processes kept, the busiest first
MIN_AGE_S = 2.0        # a process younger than this has too few clock ticks for a share


def sharing(old: dict, new: dict, dt: float, cpu: int, skip: set[int], up: float | None = None) -> list[list]:
    """The processes that shared `cpu` from the old scan to the new one (their leader on it at both, or
    bound to it alone), the busiest first: [pid, comm, share of a core over dt, bound to it alone]. The
    ranks and their children (DataLoader workers: the rank's own work) are skipped. A process started
    between the scans (a stray job started beside the rank) counts when it is bound to `cpu` alone, over
    its own life (`up`: the new scan's seconds since boot, the clock of its start time) once that is >= MIN_AGE_S."""
    out = []
    for pid, (comm, c1, t1, ppid, start) in new.items():
        if pid in skip or ppid in skip:
            continue
        if pid in old:
            _, c0, t0, _, _ = old[pid]
            span = dt
        elif up is not None and (age := up - start / _TCK) >= MIN_AGE_S:
            c0, t0, span = None, 0, min(dt, age)   # new since the old scan: its whole life, bound ones only
        else:
            continue
        share = max(0, t1 - t0) / _TCK / span
        if share < 0.05:
            continue
        bound = affinity(pid) == [cpu]
        if bound or (c0 == cpu and c1 == cpu):
            out.append([pid, comm, round(min(share, 1.0), 2), bound])
    return sorted(out, key=lambda r: -r[2])[:NEAR_TOP]


class CoreScan:
    """One node's scans: `near(now, ranks)` every tick with {pid: (its CPU now, its delay share lately)};
    -> {pid: {"cpu", "cpus", "near", "span"}} for the ranks judged this tick (a scan finished)."""

    def __init__(self):
        self.last: tuple[float, dict, dict] | None = None   # (time, scan, {rank pid: cpu then})
        self.next_t = 0.0

    def near(self, now: float, ranks: dict[int, tuple[int, float]]) -> dict[int, dict]:
        if now < self.next_t or not any(d >= SCAN_DELAY for _, d in ranks.values()):
            if self.last and now - self.last[0] > 3 * SCAN_EVERY_S:
                self.last = None   # too old to difference against
            return {}
        self.next_t = now + SCAN_EVERY_S
        cur, up = scan(), uptime()
        out = {}
        if self.last is not None:
            t0, old, cpu0 = self.last
            skip = set(ranks)
            for pid, (cpu, _) in ranks.items():
                out[pid] = {"cpu": cpu, "cpus": affinity(pid), "span": round(now - t0, 1),
                            # the rank itself on one CPU at both scans: who else was there
                            "near": sharing(old, cur, now - t0, cpu, skip, up) if cpu0.get(pid) == cpu else None}
        self.last = (now, cur, {pid: cpu for pid, (cpu, _) in ranks.items()})
        return out
