"""Where `ddpdoctor watch`'s CPU goes: its parts timed one at a time beside a REAL 2-rank torchrun + Gloo job.

    python3 benchmarks/bench_watch_parts.py [--seconds 150] [--nproc 2]

Runs watch's own NodeView (watch/observe.py) and Judge (watch/judge.py) in watch's loop, one tick a
second, with each part wrapped: the CPU time of this thread per call (time.thread_time), calls, share of
a core. py-spy's and `tc`'s CPU (children) from getrusage. The whole-run figure per watched rank is what
`bench_watch.py healthy` measures on the real `watch` process; this one says which part to work on.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from watchlab import TrainJob  # noqa: E402

import ddpdoctor.watch.observe as ob  # noqa: E402
from ddpdoctor.watch.judge import Judge  # noqa: E402

cpu: Counter = Counter()
calls: Counter = Counter()


def wrap(owner, name: str, label: str) -> None:
    f = getattr(owner, name)

    def timed(*a, **k):
        t = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            cpu[label] += time.thread_time() - t
            calls[label] += 1
    setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--nproc", type=int, default=2)
    a = ap.parse_args()
    wrap(ob.rankmod, "find", "scan for ranks")
    wrap(ob, "stacks", "py-spy dump (watch's side)")
    wrap(ob, "qdiscs", "egress shapers")
    wrap(ob, "proc_tick", "/proc of a rank")
    wrap(ob, "throttled_ns", "cgroup cpu.stat")
    wrap(ob.netstuck, "sockets", "TCP sockets (hang only)")
    with tempfile.TemporaryDirectory() as tmp:
        job = TrainJob(Path(tmp), nproc=a.nproc, seconds=a.seconds + 60)
        try:
            job.wait_ready()
            nv = ob.NodeView(job.proc.pid)
            if nv.recorder is not None:
                wrap(nv.recorder, "ensure", "py-spy record start (watch's side)")
                wrap(nv.recorder, "collect", "py-spy record read+parse")
            judge = Judge()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            p0, th0, t0 = time.process_time(), time.thread_time(), time.monotonic()
            while time.monotonic() - t0 < a.seconds:
                now = time.monotonic()
                obs = nv.observe(now, judge.wants_stacks(now))
                t = time.thread_time()
                judge.feed(obs, now)
                cpu["judge"] += time.thread_time() - t
                calls["judge"] += 1
                time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
            wall = time.monotonic() - t0
            main_s, proc_s = time.thread_time() - th0, time.process_time() - p0
            nv.close()
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        finally:
            job.kill()
    kids = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    print(f"{a.nproc} ranks, {wall:.0f} s, load average {os.getloadavg()[1]:.1f} over the last 5 min")
    for k, v in sorted(cpu.items(), key=lambda x: -x[1]):
        print(f"  {k:36s} {1000 * v / max(calls[k], 1):7.2f} ms a call x {calls[k]:4d} = {100 * v / wall:.3f} % of a core")
    print(f"  watch's main thread {100 * main_s / wall:.3f} %, its process {100 * proc_s / wall:.3f} %, "
          f"py-spy and tc {100 * kids / wall:.3f} % of a core")
    print(f"  per watched rank: {100 * (proc_s + kids) / wall / a.nproc:.3f} % of a core")


if __name__ == "__main__":
    main()
