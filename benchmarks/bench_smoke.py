"""`ddpdoctor smoke` cost and fidelity on CPU (Gloo), 2 local ranks.

1. `smoke --nproc 2 --quick` vs a minimal hand-written script that starts two processes,
   initialises a Gloo group and runs one all_reduce. Target: ratio < 2.
2. `smoke --nproc 2` (default: correctness 4 B..64 MiB, bandwidth sweep). Target: < 15 s.
3. the busbw smoke reports vs a plain torch.distributed.all_reduce timing loop on the same sizes,
   iterations and statistic (per-rank median, slowest rank). Target: ratio within 10% (0.9-1.1).
   a) on the same group: the worker runs the plain loop right after its own measurement of each
      size (DDPDOCTOR_SMOKE_BENCH_REFERENCE=1), so both see the same processes and load;
   b) in separate processes (the plain loop without ddpdoctor's threads and supervisor), with a
      second plain run as control: on a loaded 2-core machine that control shows the noise floor.

Run: python benchmarks/bench_smoke.py [--runs 5] [--same-group-runs 11]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ddpdoctor.facts import bandwidth as bw  # noqa: E402
from ddpdoctor.smoke.plan import SmokeConfig, bandwidth_iters, bandwidth_sizes, fmt_bytes  # noqa: E402

LAUNCH = '''
import json, os, socket, subprocess, sys
if "RANK" not in os.environ:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    procs = [subprocess.Popen([sys.executable, __file__] + sys.argv[1:], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": str(port)}) for r in range(2)]
    outs = [p.communicate()[0] for p in procs]
    print(json.dumps([o for o in outs]))
    sys.exit(max(p.returncode for p in procs))
'''

MINIMAL = LAUNCH + '''
import torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.ones(1)
dist.all_reduce(x)
assert x.item() == 2
dist.destroy_process_group()
'''

PLAIN_LOOP = LAUNCH + '''
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
plan = json.loads(sys.argv[1])  # [[size, warmup, iters], ...]
out = []
for size, warmup, iters in plan:
    x = torch.zeros(size // 4)
    for _ in range(warmup):
        dist.all_reduce(x)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t)
    out.append({"size": size, "times": times})
print(json.dumps(out))
dist.destroy_process_group()
'''


def timed(argv, **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode not in (0,):
        raise SystemExit(f"{argv} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return time.perf_counter() - t0, p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--same-group-runs", type=int, default=11,
                    help="runs for 3a: latency-bound sizes need many on a shared machine")
    a = ap.parse_args()
    py = sys.executable
    smoke = [py, "-m", "ddpdoctor", "smoke", "--nproc", "2"]
    with tempfile.TemporaryDirectory() as d:
        minimal, plain = os.path.join(d, "minimal.py"), os.path.join(d, "plain.py")
        open(minimal, "w").write(MINIMAL)
        open(plain, "w").write(PLAIN_LOOP)

        t_min, t_quick = [], []
        for _ in range(a.runs):  # alternate, so that load from elsewhere hits both alike
            t_min.append(timed([py, minimal])[0])
            t_quick.append(timed(smoke + ["--quick"])[0])
        m, q = statistics.median(t_min), statistics.median(t_quick)
        print(f"1. minimal script (2 procs, gloo init, 1 all_reduce): {m:.2f} s   "
              f"smoke --nproc 2 --quick: {q:.2f} s   ratio {q / m:.2f} (target < 2)")

        t_full, smoke_rows, plain_rows, control_rows, same_ratio = [], {}, {}, {}, {}
        sizes = bandwidth_sizes(SmokeConfig())
        loop_plan = json.dumps([[s, *bandwidth_iters(s)] for s in sizes])

        def plain_loop(into):
            _, p = timed([py, plain, loop_plan])
            per_rank = {r: json.loads(out) for r, out in enumerate(json.loads(p.stdout))}
            for row in bw.world_rows(per_rank, 2):
                into.setdefault(row["size"], []).append(row["busbw_gbps"])

        for k in range(a.runs):  # alternate the order so that drifting load hits all three alike
            order = ["smoke", "plain", "control"] if k % 2 == 0 else ["control", "plain", "smoke"]
            for what in order:
                if what == "smoke":
                    t, p = timed(smoke + ["--json"])
                    t_full.append(t)
                    for row in json.loads(p.stdout)["bandwidth"]:
                        smoke_rows.setdefault(row["size"], []).append(row["busbw_gbps"])
                else:
                    plain_loop(plain_rows if what == "plain" else control_rows)
        for _ in range(a.same_group_runs):
            _, p = timed(smoke + ["--json"], env={**os.environ, "DDPDOCTOR_SMOKE_BENCH_REFERENCE": "1"})
            ranks = json.loads(p.stdout)["ranks"]
            ours = bw.world_rows({r["rank"]: r["bandwidth"] for r in ranks}, 2)
            ref = bw.world_rows({r["rank"]: [{"size": e["size"], "times": e["reference_times"]}
                                             for e in r["bandwidth"]] for r in ranks}, 2)
            for o, f in zip(ours, ref):
                same_ratio.setdefault(o["size"], []).append(o["busbw_gbps"] / f["busbw_gbps"])
        print(f"2. smoke --nproc 2 (default, 64 MiB max): median {statistics.median(t_full):.2f} s, "
              f"max {max(t_full):.2f} s over {a.runs} runs (target < 15 s)")
        print("3a. all_reduce busbw on the same group: smoke's measurement / a plain loop right after it "
              "(median of per-run ratios; target 0.9-1.1)")
        for s in sizes:
            r = same_ratio[s]
            print(f"   {fmt_bytes(s):>7}: ratio {statistics.median(r):.3f}   (runs: {' '.join(f'{x:.2f}' for x in r)})")
        print("3b. separate processes, median over runs: smoke vs a plain torch.distributed loop;")
        print("   control = a second plain loop vs the first: the noise floor of this machine right now")
        for s in sizes:
            sm, pl, co = (statistics.median(d[s]) for d in (smoke_rows, plain_rows, control_rows))
            print(f"   {fmt_bytes(s):>7}: smoke {sm:.3f} GB/s   plain {pl:.3f} GB/s   ratio {sm / pl:.3f}"
                  f"   (control {co / pl:.3f})")
        print(f"   load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

if __name__ == "__main__":
    main()
