"""`ddpdoctor watch` measured on REAL torchrun + Gloo training loops (tests/watch_jobs/train.py).

    python3 benchmarks/bench_watch.py faults [--seeds 3] [--kinds sleep,stop,other,loader,kill,slow1.6,cap0.15]
    python3 benchmarks/bench_watch.py healthy [--seconds 600] [--nproc 2]    false events per hour, cost, memory
    python3 benchmarks/bench_watch.py fanin [--nodes 1,16,128,1000]          --gather's first node vs senders

faults: per fault and seed, the time from injection (the fault file written, the signal sent, the
cgroup cap applied) to the verdict line, and whether the right rank was named. A seed changes when
the fault is injected (10 + 7*seed s after the job is ready) and which rank gets it.
healthy: events printed over a healthy run (goal 0), watch's CPU (its own and its py-spy children's,
from getrusage after it exits) per watched rank as a share of one core, its RSS at start and end.
fanin: the first node of `--gather` receiving one JSON line per node per second (real TCP on
localhost, lines the size 8 ranks make) and judging them: its CPU per second vs the number of nodes.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from watchlab import CpuCap, TrainJob, Watch  # noqa: E402

KIND_GOAL = {"hang": 15.0, "straggler": 60.0, "rank_gone": 5.0}


def inject(job: TrainJob, kind: str, rank: int):
    """-> (expected event kind, cleanup)"""
    if kind in ("sleep", "other", "loader"):
        job.fault(f"{kind}:{rank}")
        return "hang", None
    if kind.startswith("slow"):
        job.fault(f"slow:{rank}:{kind[4:]}")
        return "straggler", None
    pid = job.rank_pid(rank)
    if kind == "stop":
        os.kill(pid, signal.SIGSTOP)
        return "hang", lambda: os.kill(pid, signal.SIGCONT)
    if kind == "kill":
        os.kill(pid, signal.SIGKILL)
        return "rank_gone", None
    if kind.startswith("cap"):
        cap = CpuCap(pid, float(kind[3:]))
        return "straggler", cap.close
    raise SystemExit(f"unknown fault {kind}")


def faults(a) -> None:
    rows = []
    for kind in a.kinds.split(","):
        for seed in range(a.seeds):
            nproc = 3 if kind == "other" else a.nproc
            rank = seed % nproc
            with tempfile.TemporaryDirectory() as tmp:
                job = TrainJob(Path(tmp), nproc=nproc, seconds=400)
                w = None
                cleanup = None
                try:
                    job.wait_ready()
                    w = Watch("--pid", str(job.proc.pid))
                    time.sleep(10 + 7 * seed)
                    early = [e for e in w.events if e["kind"] != "summary"]
                    t = time.monotonic()
                    want, cleanup = inject(job, kind, rank)
                    e = w.wait_for(want, 120, after=t)
                    took = None if e is None else e["at"] - t
                    right = e is not None and e["ranks"] == [rank]
                    rows.append((kind, seed, rank, took, right, len(early), e and e.get("detail")))
                    print(f"{kind:8s} seed {seed} rank {rank}: "
                          + (f"{took:5.1f} s, {'right' if right else 'WRONG'} rank {e['ranks']}: {e.get('detail')}"
                             if e else "no verdict in 120 s") + (f" ({len(early)} event(s) before the fault)" if early else ""),
                          flush=True)
                finally:
                    if cleanup:
                        cleanup()
                    if w:
                        w.stop()
                    job.kill()
    print("\nfault     median s  worst s  right  (goal)")
    for kind in dict.fromkeys(r[0] for r in rows):
        rs = [r for r in rows if r[0] == kind]
        ts = [r[3] for r in rs if r[3] is not None]
        goal = KIND_GOAL["straggler" if kind.startswith(("slow", "cap")) else "rank_gone" if kind == "kill" else "hang"]
        print(f"{kind:8s} {statistics.median(ts) if ts else float('nan'):8.1f} {max(ts) if ts else float('nan'):8.1f}"
              f"  {sum(r[4] for r in rs)}/{len(rs)}  (≤ {goal:g} s)")


def healthy(a) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        job = TrainJob(Path(tmp), nproc=a.nproc, seconds=a.seconds + 60)
        try:
            job.wait_ready()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            w = Watch("--pid", str(job.proc.pid), "--deadline", str(a.seconds))
            rss = []
            t0 = time.monotonic()
            while w.proc.poll() is None:
                try:
                    for ln in open(f"/proc/{w.proc.pid}/status"):
                        if ln.startswith("VmRSS:"):
                            rss.append(int(ln.split()[1]))
                except OSError:
                    pass
                time.sleep(5)
            w.finish()
            wall = time.monotonic() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        finally:
            job.kill()
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    bad = [e for e in w.events if e["kind"] != "summary"]
    print(f"healthy {a.nproc} ranks for {wall:.0f} s: {len(bad)} event(s) -> {len(bad) * 3600 / wall:.1f} per hour")
    for e in bad:
        print("  ", e)
    print(f"watch CPU (itself + py-spy): {cpu:.2f} s = {100 * cpu / wall:.2f} % of a core, "
          f"{100 * cpu / wall / a.nproc:.2f} % per watched rank")
    if rss:
        print(f"watch RSS: {rss[0] / 1024:.1f} MiB after 5 s, {max(rss) / 1024:.1f} MiB max, {rss[-1] / 1024:.1f} MiB at the end")


def fanin(a) -> None:
    from ddpdoctor.inspect.gather import Step
    from ddpdoctor.watch.gather import Gathered
    from ddpdoctor.watch.judge import Judge

    rank = {"rank": 0, "host": "nodeX", "pid": 1234, "world_size": 8000, "local_rank": 0, "state": "S",
            "run_ns": 0, "delay_ns": 0, "io": 0, "throttled_ns": 0, "cgroup": "/sys/fs/cgroup/cpu/slurm/uid_0/job_1",
            "stack": None}
    for n in [int(x) for x in a.nodes.split(",")]:
        port = _free_port()
        step = Step(0, n + 1, "first", tuple(["first"] + [f"n{i}" for i in range(n)]), "127.0.0.1", port, "1.0", True)
        srv = socket.create_server(("127.0.0.1", port), backlog=max(128, n))
        src = Gathered(step, None, srv)
        judge = Judge()
        stop = threading.Event()

        def sender(i):
            c = socket.create_connection(("127.0.0.1", port))
            k = 0
            while not stop.is_set():
                if src._stop:
                    break
                k += 1
                obs = [{**rank, "rank": i * 8 + r, "host": f"n{i}", "run_ns": k * 5 * 10**8, "io": k} for r in range(8)]
                c.sendall(json.dumps({"run": "1.0", "index": i + 1, "obs": obs}).encode() + b"\n")
                stop.wait(1.0)
            c.close()
        # the senders run in this process too: measure the judging thread's CPU, not theirs
        ths = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(n)]
        for th in ths:
            th.start()
        time.sleep(2)
        c0 = time.thread_time()
        p0 = time.process_time()
        t0 = time.monotonic()
        got = 0
        while time.monotonic() - t0 < a.seconds:
            now = time.monotonic()
            obs = src.observe(now, False)
            got += len(obs)
            judge.feed(obs, now)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
        judge_cpu = time.thread_time() - c0
        all_cpu = time.process_time() - p0
        stop.set()
        src.close()
        print(f"{n:5d} nodes x 8 ranks: {got / a.seconds:8.0f} rank records/s judged, judging "
              f"{100 * judge_cpu / a.seconds:.2f} % of a core; the whole process (receiving, parsing, and the "
              f"senders' encoding, an upper bound) {100 * all_cpu / a.seconds:.1f} %", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("faults")
    f.add_argument("--seeds", type=int, default=3)
    f.add_argument("--nproc", type=int, default=2)
    f.add_argument("--kinds", default="sleep,stop,other,loader,kill,slow1.6,slow1.2")
    h = sub.add_parser("healthy")
    h.add_argument("--seconds", type=float, default=600)
    h.add_argument("--nproc", type=int, default=2)
    g = sub.add_parser("fanin")
    g.add_argument("--nodes", default="1,16,128,1000")
    g.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    {"faults": faults, "healthy": healthy, "fanin": fanin}[a.cmd](a)


if __name__ == "__main__":
    main()
