"""`srun --overlap ... ddpdoctor watch --gather` over N Slurm lab nodes: what the fan-in costs the first node.

Each node runs a real slurmd in a network and pid namespace of its own (SlurmLab(pid_ns=True)) and one
"rank" of a job (a sleeping Python with RANK/WORLD_SIZE from srun, as bench_inspect_gather.py: 16 torch
processes would not fit this machine; tests/test_watch_gather_lab.py proves the verdicts on real Gloo jobs).
Every node's watch sends one JSON line a second to the first node, which judges them all. Measured from
outside, on the host's /proc (the watch processes are found in each node's network namespace):
- CPU of the first node's watch process (fan-in: one thread per node reading lines, json.loads, the judge
  over every rank) and of the last node's (its own rank only), over a steady window; their difference
  divided by the other nodes is the fan-in cost per node;
- resident memory of the first node's watch at the start and the end of the window (flat or growing);
- bytes the first node received on its gather connections (`ss -ti`: tcp_info bytes_received, per second);
- time to a merged verdict: the last node's rank is killed (SIGKILL); seconds until the first node prints
  `rank_gone` for it, and whether the summary names every node.
All nodes share this machine's CPUs (2 here, shared with other work): read ratios, not absolute times.

    python benchmarks/bench_watch_gather.py [--sizes 2 4 8 16] [--window 30] [--ranks-per-node 1]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lab import Lab  # noqa: E402
from slurmlab import DD, REPO_ROOT, SlurmLab  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_inspect_gather import sleeping_job  # noqa: E402

RANK = ('export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=node1 '
        'MASTER_PORT=29510; exec "$0" -c "import time; print(\'ready\', flush=True); time.sleep(900)"')
HZ = os.sysconf("SC_CLK_TCK")


def ns_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10).stdout
    return [int(x) for x in out.split()]


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def find(ns: str, *words: str) -> int | None:
    for pid in ns_pids(ns):
        c = cmdline(pid)
        if all(w in c for w in words) and "srun" not in c.split(" ", 1)[0]:
            return pid
    return None


def received(ns: str, port: int = 29404) -> int:
    """Bytes the gather listener's connections received so far (tcp_info bytes_received)."""
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, timeout=10).stdout
    return sum(int(w.split(":", 1)[1]) for w in out.split() if w.startswith("bytes_received:"))


def rank_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
        return int(env[b"RANK"])
    except (OSError, KeyError, ValueError):
        return None


def usage(pid: int) -> tuple[float, float, int, int]:
    """(own CPU s, reaped children's CPU s, RSS bytes, rchar)."""
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                rss = int(ln.split()[1]) * 1024
    rchar = 0
    with open(f"/proc/{pid}/io") as f:
        for ln in f:
            if ln.startswith("rchar:"):
                rchar = int(ln.split()[1])
    return (int(st[11]) + int(st[12])) / HZ, (int(st[13]) + int(st[14])) / HZ, rss, rchar


def one(n: int, window: float, per_node: int = 1) -> dict:
    names = [f"node{i}" for i in range(1, n + 1)]
    with Lab(("head", *names)) as lab, SlurmLab(lab, pid_ns=True, cpus=per_node) as slurm:
        job, jobid = sleeping_job(lab, slurm, n, RANK, timeout=180, per_node=per_node)
        deadline = 25 + window + 40
        w = lab.popen("head", ["srun", "--jobid", jobid, "--overlap", "-N", str(n), "--ntasks-per-node", "1", *DD,
                               "watch", "--gather", "--json", "--deadline", str(deadline)],
                      env={**slurm.env, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
                      stderr=subprocess.DEVNULL, text=True)
        events: list[tuple[float, dict]] = []

        def read():
            for ln in w.stdout:
                try:
                    events.append((time.monotonic(), json.loads(ln)))
                except ValueError:
                    pass
        threading.Thread(target=read, daemon=True).start()
        first_ns, last_ns = lab.node(names[0]).ns, lab.node(names[-1]).ns
        t_end = time.monotonic() + 60
        firstw = lastw = None
        while (firstw is None or lastw is None) and time.monotonic() < t_end:
            firstw = find(first_ns, "ddpdoctor", "watch", "--gather")
            lastw = find(last_ns, "ddpdoctor", "watch", "--gather")
            time.sleep(0.5)
        if firstw is None or lastw is None:
            raise SystemExit(f"{n} nodes: watch did not start on the first or last node")
        time.sleep(20)  # past startup (imports, the first rank discovery, py-spy's first chunks)
        a0, l0, b0, t0 = usage(firstw), usage(lastw), received(first_ns), time.monotonic()
        rss = [a0[2]]
        while time.monotonic() - t0 < window:
            time.sleep(1)
            rss.append(usage(firstw)[2])
        a1, l1, b1, t1 = usage(firstw), usage(lastw), received(first_ns), time.monotonic()
        victim = find(last_ns, "time.sleep(900)")
        vrank = rank_of(victim)
        t_kill = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        got = None
        while time.monotonic() - t_kill < 40 and got is None:
            got = next((t for t, e in events if e.get("kind") == "rank_gone" and e.get("ranks") == [vrank]), None)
            time.sleep(0.1)
        w.wait(timeout=deadline + 60)
        time.sleep(0.5)
        summ = next((e for _, e in reversed(events) if e.get("kind") == "summary"), {})
        lab.kill(job)
    dt = t1 - t0
    return {"n": n, "ranks": n * per_node, "first_cpu": (a1[0] - a0[0]) / dt, "last_cpu": (l1[0] - l0[0]) / dt,
            "first_children_cpu": (a1[1] - a0[1]) / dt, "rss0": rss[0], "rss1": rss[-1], "rss_max": max(rss),
            "rx_per_s": (b1 - b0) / dt,
            "verdict_s": None if got is None else got - t_kill, "summary_hosts": len(summ.get("hosts", []))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--ranks-per-node", type=int, default=1)
    a = ap.parse_args()
    print(f"{os.cpu_count()} CPUs shared by every lab node; CPU as a share of one core over a {a.window:.0f} s window")
    print(f"{'nodes':>5} {'ranks':>5} {'first cpu':>9} {'last cpu':>8} {'fan-in/node':>11} {'rx B/s':>8} {'rss start/end/max MiB':>22} "
          f"{'verdict s':>9} {'hosts':>5}")
    rows = []
    for n in a.sizes:
        r = one(n, a.window, a.ranks_per_node)
        rows.append(r)
        per = (r["first_cpu"] - r["last_cpu"]) / max(1, n - 1)
        print(f"{n:>5} {r['ranks']:>5} {r['first_cpu']:9.2%} {r['last_cpu']:8.2%} {per:11.3%} {r['rx_per_s']:8.0f} "
              f"{r['rss0'] / 2**20:7.1f}/{r['rss1'] / 2**20:5.1f}/{r['rss_max'] / 2**20:5.1f}      "
              f"{r['verdict_s'] if r['verdict_s'] is None else round(r['verdict_s'], 2)!s:>9} {r['summary_hosts']:>5}",
              flush=True)
    if len(rows) >= 2:  # least squares over the sizes: first-node CPU and RSS against nodes
        xs = [r["n"] for r in rows]
        for key, unit, scale in (("first_cpu", "of a core", 1.0), ("rss1", "MiB", 2**-20), ("rx_per_s", "B/s", 1.0)):
            ys = [r[key] * scale for r in rows]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
            at = my + slope * (1000 - mx)
            shown = f"{at:.1%}" if key == "first_cpu" else f"{at:,.0f}"
            print(f"slope {key}: {slope * (100 if key == 'first_cpu' else 1):.3f}{'%' if key == 'first_cpu' else ''} "
                  f"per node; at 1000 nodes (linear): {shown} {unit if key != 'first_cpu' else 'of a core'}")


if __name__ == "__main__":
    main()
