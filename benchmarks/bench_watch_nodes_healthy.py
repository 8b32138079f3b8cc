"""A healthy multi-node Gloo training job watched with `srun --overlap ... ddpdoctor watch --gather` (issue 22:
"healthy multi-node Gloo training loops for 10 minutes: zero events").

Slurm lab nodes (a real slurmd each, in a network and pid namespace of its own), one rank a node of
tests/watch_jobs/train.py (`srun python`, or `srun torchrun` with --launch torchrun), watched from every node with
the first node judging. Prints every event (a healthy job must give none but the summary), events per hour,
each node's watch CPU (its process and its py-spy children, from the host's /proc) per watched rank, the
first node's RSS at the start and the end, and the machine's load: all nodes share this machine's CPUs.

    python benchmarks/bench_watch_nodes_healthy.py [--nodes 3] [--seconds 600] [--launch python|torchrun]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from bench_watch_gather import find, ns_pids, usage  # noqa: E402
from lab import Lab  # noqa: E402
from slurmlab import SlurmLab  # noqa: E402
from watchlab import SlurmJob, srun_python, srun_torchrun  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def tree_cpu(ns: str, root: int) -> float:
    """CPU seconds of `root` and of its live children in namespace `ns` (py-spy), plus its reaped children."""
    total = 0.0
    for pid in ns_pids(ns):
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if pid == root or int(st[1]) == root:
            total += (int(st[11]) + int(st[12]) + int(st[13]) + int(st[14])) / HZ
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--launch", choices=("python", "torchrun"), default="python")
    a = ap.parse_args()
    names = [f"node{i}" for i in range(1, a.nodes + 1)]
    wrap = srun_python(29515) if a.launch == "python" else srun_torchrun(29515, a.nodes)
    with tempfile.TemporaryDirectory() as tmp, Lab(("head", *names)) as lab, \
            SlurmLab(lab, pid_ns=True, cpus=2) as slurm:
        job = SlurmJob(slurm, Path(tmp), "healthy", a.nodes, wrap, seconds=a.seconds + 120)
        try:
            job.start_watch(job.wait_ready(180), a.seconds)
            watchers: dict[str, int] = {}
            end = time.monotonic() + 60
            while len(watchers) < a.nodes and time.monotonic() < end:
                for n in names:
                    pid = find(lab.node(n).ns, "ddpdoctor", "watch", "--gather")
                    if pid:
                        watchers[n] = pid
                time.sleep(0.5)
            t0 = time.monotonic()
            cpu0 = {n: tree_cpu(lab.node(n).ns, p) for n, p in watchers.items()}
            rss0 = usage(watchers[names[0]])[2]
            loads = []
            while job.watch.poll() is None and time.monotonic() - t0 < a.seconds - 5:
                loads.append(os.getloadavg()[0])
                time.sleep(10)
            cpu1 = {n: tree_cpu(lab.node(n).ns, p) for n, p in watchers.items()}
            rss1 = usage(watchers[names[0]])[2]
            wall = time.monotonic() - t0
            job.finish(a.seconds + 120)
        finally:
            job.close()
    bad = [e for e in job.events if e["kind"] != "summary"]
    print(f"healthy {a.nodes} nodes x 1 rank (srun {a.launch}), watched {wall:.0f} s, load average "
          f"{min(loads):.1f}-{max(loads):.1f}: {len(bad)} event(s) -> {len(bad) * 3600 / wall:.1f} per hour")
    for e in bad:
        print("  ", {k: v for k, v in e.items() if k != "at"})
    summ = next((e for e in job.events if e["kind"] == "summary"), None)
    if summ:
        print(f"summary: hosts {summ.get('hosts')}, watched {summ.get('watched_s')} s, events {summ.get('events')}")
    else:
        print("no summary: watch did not end by itself")
    for n in watchers:
        print(f"  {n}: watch + py-spy {100 * (cpu1[n] - cpu0[n]) / wall:.2f} % of a core (1 rank)")
    print(f"first node's watch RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
