"""What finding the ranks costs: probes/ranks.discover() (one /proc snapshot + identification) against the
bare pass the old rank finder (probes/jobprocs, gone) made (read every process's environ and stat), on this machine's /proc.

    python3 benchmarks/bench_rank_discovery.py [--runs 30]

Prints the process count, the median of each and their ratio. The extra cost is reading argv, exe and
NSpid per process and maps/net/tcp for the few processes whose rank is not in their environment.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddpdoctor.probes import proctable, ranks  # noqa: E402


def bare() -> int:
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            pid = int(d)
            if proctable.read_environ(pid) is not None and proctable.read_stat(pid) is not None:
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    procs = len([d for d in os.listdir("/proc") if d.isdigit()])
    times = {}
    for name, fn in (("environ+stat pass (old finder)", bare), ("ranks.discover()", ranks.discover)):
        ts = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        times[name] = statistics.median(ts)
        print(f"{name:34s} median {times[name] * 1000:7.1f} ms  (min {min(ts) * 1000:.1f}, max {max(ts) * 1000:.1f})")
    old, new = times.values()
    jobs = ranks.discover().jobs
    print(f"{procs} processes, {len(jobs)} job(s), {sum(len(j.ranks) for j in jobs)} rank(s): ratio {new / old:.2f}x")


if __name__ == "__main__":
    main()
