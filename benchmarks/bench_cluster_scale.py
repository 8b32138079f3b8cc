"""`ddpdoctor cluster` from 2 to 64 lab nodes: per-node cost and store load, full matrix vs pairing.

Each node is a network namespace of this machine (tests/lab.py) running `ddpdoctor cluster` with the
variables srun sets for a one-task-per-node step (SLURM_STEP_NODELIST, SLURMD_NODENAME, ...; no
slurmd, so the lab stays light at 64 nodes). For each N and strategy it prints:

* probes/node   peers each node probes (matrix: N-1; pairs: its round-1 partner(s) + round 2);
* probe s       median / max of the per-node probe phase (the cost that must stay flat);
* store keys    keys the protocol writes to the first node's TCPStore (hello + result per node,
                round 2's plan and results), counted from the run's plan, not read back from the
                store; the first node reads every record, so its load grows with N x record size;
* wall s        the whole run, start to the first node's report; on one 2-core machine this grows
                with N mostly because every node imports torch (~1.6 s CPU each) on the same cores.

Run as root:  python benchmarks/bench_cluster_scale.py [--sizes 2 4 8 16 32 64] [--bad 1]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lab import Lab  # noqa: E402

DD = [sys.executable, "-m", "ddpdoctor"]
PORT = 29400


def run(n: int, strategy: str, deadline: float, bad: int) -> dict:
    names = [f"node{i}" for i in range(1, n + 1)]
    with Lab(names) as lab, tempfile.TemporaryDirectory() as tmp:
        for k in range(bad):  # the last `bad` nodes drop every peer on the probe port
            victim = names[-1 - k]
            lab.iptables(victim, "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "DROP")
        procs = []
        t0 = time.monotonic()
        for i, node in enumerate(names):
            env = {"SLURM_STEP_NODELIST": f"node[1-{n}]", "SLURMD_NODENAME": node, "SLURM_NODEID": str(i),
                   "SLURM_LOCALID": "0", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NNODES": str(n)}
            out = open(os.path.join(tmp, f"{node}.out"), "w+")
            procs.append((node, out, lab.popen(node, [*DD, "cluster", "--json", "--strategy", strategy,
                                                      "--max-peers", str(max(1, n - 1)), "--deadline", str(deadline),
                                                      "--out-dir", tmp], env=env, stdout=out,
                                              stderr=open(os.devnull, "w"))))
        first = procs[0]
        try:
            first[2].wait(timeout=deadline + 60)
        finally:
            wall = time.monotonic() - t0
            for _, _, p in procs[1:]:
                try:
                    p.wait(timeout=10)
                except Exception:  # noqa: BLE001
                    lab.kill(p)
        first[1].seek(0)
        rep = json.loads(first[1].read())
    c = rep["cluster"]
    timing = c["timing"]
    probe_s = sorted(t.get("probe_s", 0) for t in timing.values() if t)
    pv = c.get("pairing") or {}
    tests = pv.get("tests")
    per_node = (2 * tests / n) if tests else (n - 1)
    # store load: hello + result (+ result2 and round2 for pairs), bytes of the records the first node read
    rec_bytes = len(json.dumps(c.get("timing"))) + len(json.dumps(rep.get("results")))
    keys = 2 * n + 2 + ((len(pv.get("round2") or []) * 2 + 1) if pv else 0)
    return {"n": n, "strategy": c.get("strategy"), "wall_s": round(wall, 2), "probe_med": probe_s[len(probe_s) // 2],
            "probe_max": probe_s[-1], "probes_per_node": round(per_node, 2), "store_keys": keys,
            "report_bytes": rec_bytes, "failing": c["failing"], "bad": pv.get("bad"), "rounds": pv.get("rounds"),
            "missing": c["missing"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    ap.add_argument("--strategies", nargs="+", default=["matrix", "pairs"])
    ap.add_argument("--bad", type=int, default=1, help="nodes that drop every peer (named by the run)")
    ap.add_argument("--deadline", type=float, default=0, help="per run; default 20 + 2 s per node")
    a = ap.parse_args()
    rows = []
    print(f"{'N':>4} {'strategy':8} {'wall s':>7} {'probe s med/max':>16} {'probes/node':>11} {'store keys':>10} "
          f"{'failing':>12} rounds")
    for n in a.sizes:
        for s in a.strategies:
            r = run(n, s, a.deadline or 20 + 2 * n, min(a.bad, max(0, n // 2 - 1)))
            rows.append(r)
            print(f"{n:>4} {r['strategy']:8} {r['wall_s']:>7.1f} {r['probe_med']:>7.2f}/{r['probe_max']:<7.2f} "
                  f"{r['probes_per_node']:>11} {r['store_keys']:>10} {r['failing'] or '-':>12} {r['rounds'] or '-'}",
                  flush=True)
    by = {(r["n"], r["strategy"]): r for r in rows}
    for n in a.sizes:
        m, p = by.get((n, "matrix")), by.get((n, "pairs"))
        if m and p:
            print(f"N={n}: probes per node matrix/pairs = {m['probes_per_node'] / max(p['probes_per_node'], 1e-9):.1f}x, "
                  f"probe phase max matrix/pairs = {m['probe_max'] / max(p['probe_max'], 1e-3):.1f}x")


if __name__ == "__main__":
    main()
