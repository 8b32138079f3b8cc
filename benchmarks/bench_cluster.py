"""`srun -N N ddpdoctor cluster` wall time for N = 2, 4, 8, 16 lab nodes, and what each node spends.

Every node is a network namespace of one machine with a real slurmd (tests/slurmlab.py), so all
nodes share this machine's CPUs: the wall time grows with N mostly because N processes import
torch (~1.6 s of CPU each) on the same cores. The per-node probe phase is the cost that must
stay flat: each node probes at most --max-peers peers, all at once. Run as root:

    python benchmarks/bench_cluster.py [--sizes 2 4 8 16] [--max-peers 16] [--bounded 4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lab import Lab  # noqa: E402
from slurmlab import DD, SlurmLab  # noqa: E402


def one(n: int, max_peers: int, deadline: float) -> dict:
    names = [f"node{i}" for i in range(1, n + 1)]
    with Lab(("head", *names)) as lab, SlurmLab(lab) as slurm:
        t0 = time.perf_counter()
        r = slurm.srun("-N", str(n), "--ntasks-per-node=1", *DD, "cluster", "--json", "--out-dir", str(slurm.dir),
                       "--deadline", str(deadline), "--max-peers", str(max_peers), timeout=deadline + 120)
        wall = time.perf_counter() - t0
        rep = json.loads(r.stdout)
    timing = rep["cluster"]["timing"]
    per = [t for t in timing.values() if t]
    probes = sum(len(row) - row.count("·") - 1 for row in rep["cluster"]["matrix"]) if rep["cluster"]["matrix"] else None
    return {"n": n, "wall": wall, "exit": rep["exit_code"], "missing": rep["cluster"]["missing"],
            "store": statistics.median(t["store_s"] for t in per),
            "probe": statistics.median(t["probe_s"] for t in per), "probe_max": max(t["probe_s"] for t in per),
            "total": statistics.median(t["total_s"] for t in per), "probes": probes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--max-peers", type=int, default=16)
    ap.add_argument("--bounded", type=int, default=4, help="also run every size above it with this --max-peers (0: no)")
    ap.add_argument("--deadline", type=float, default=120)
    a = ap.parse_args()
    runs = [(n, a.max_peers) for n in a.sizes]
    if a.bounded:
        runs += [(n, a.bounded) for n in a.sizes if n - 1 > a.bounded]
    print(f"{os.cpu_count()} CPUs shared by every lab node; times in seconds")
    print(f"{'nodes':>5} {'max-peers':>9} {'probes':>6} {'wall':>6} {'wall/node':>9} "
          f"{'store up':>8} {'probe phase':>11} {'probe max':>9} {'node total':>10}  verdict")
    rows = []
    for n, k in runs:
        row = one(n, k, a.deadline)
        rows.append(row)
        verdict = "ok" if row["exit"] == 0 else f"exit {row['exit']} missing={row['missing']}"
        print(f"{n:>5} {k:>9} {row['probes'] if row['probes'] is not None else '-':>6} {row['wall']:6.1f} "
              f"{row['wall'] / n:9.2f} {row['store']:8.2f} {row['probe']:11.3f} {row['probe_max']:9.3f} "
              f"{row['total']:10.2f}  {verdict}", flush=True)
    for k in sorted({k for _, k in runs}):
        mine = [r for r, (_, kk) in zip(rows, runs) if kk == k]
        if len(mine) > 1:
            print(f"--max-peers {k}: wall/node {mine[0]['wall'] / mine[0]['n']:.2f} -> {mine[-1]['wall'] / mine[-1]['n']:.2f} s, "
                  f"probe phase {mine[0]['probe']:.3f} -> {mine[-1]['probe']:.3f} s from {mine[0]['n']} to {mine[-1]['n']} nodes")


if __name__ == "__main__":
    main()
