"""A rank on a busy core, live: this tree's `watch` and another checkout's side by side on the SAME job.

    python3 benchmarks/bench_watch_busycore.py faults [--seeds 3] [--vs /work/main] [--nice -10] [--wait 120]
    python3 benchmarks/bench_watch_busycore.py healthy [--seconds 300] [--vs /work/main]

faults: per seed, a 2-rank tests/watch_jobs/train.py job and both watches beside it (`python -P`, each with
its checkout on PYTHONPATH); 45 + 5*seed s healthy, then rank seed%2 is bound to the CPU it runs on with a
CPU hog bound there (tests/watchlab.py BusyCore: the hog's session at --nice, sched autogroup); per watch
the time from it to its first straggler event naming that rank (a miss counts as --wait), its cause, and
any event before the fault. The job's own step time after / before (its log) says how slow it really got.
healthy: one job, both watches, --seconds: the events of each (false events per hour).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_watch import step_times  # noqa: E402
from watchlab import BusyCore, TrainJob, Watch  # noqa: E402


def watches(pid: int, vs: str, *args: str) -> dict[str, Watch]:
    # -P: the current directory is not put before PYTHONPATH (else both would import the same checkout)
    return {tree: Watch("--pid", str(pid), *args, argv_prefix=[sys.executable, "-P", "-m", "ddpdoctor"],
                        env={"PYTHONPATH": tree}) for tree in (str(ROOT), vs)}


def faults(a) -> None:
    rows = []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        rank = seed % 2
        with tempfile.TemporaryDirectory() as tmp:
            job = TrainJob(Path(tmp), nproc=2, seconds=600)
            ws, core = {}, None
            try:
                job.wait_ready()
                ws = watches(job.proc.pid, a.vs)
                time.sleep(45 + 5 * seed)
                early = {k: [e for e in w.events if e["kind"] != "summary"] for k, w in ws.items()}
                core = BusyCore(job.rank_pid(rank), nice=a.nice)
                t = time.monotonic()
                end = t + a.wait
                got = {}
                while time.monotonic() < end and len(got) < len(ws):
                    for k, w in ws.items():
                        e = next((e for e in w.events if e["kind"] == "straggler" and e["at"] >= t), None)
                        if e is not None and k not in got:
                            got[k] = e
                    time.sleep(0.5)
                st = step_times(job.log, t)
                slow = f"job's step {st[1] / st[0]:.2f}x" if st else "job's step ?"
                for k in ws:
                    e = got.get(k)
                    took = None if e is None else e["at"] - t
                    right = e is not None and e["ranks"] == [rank]
                    rows.append((k, seed, took if right else None, len(early[k])))
                    print(f"seed {seed} rank {rank} [{slow}, load {os.getloadavg()[0]:.1f}] {k}: "
                          + (f"{took:5.1f} s {'right' if right else 'WRONG'} {e['ranks']}: {e['detail']}; {e.get('cause')}"
                             if e else f"no verdict in {a.wait:g} s")
                          + (f" ({len(early[k])} event(s) before the fault)" if early[k] else ""), flush=True)
            finally:
                if core is not None:
                    core.close()
                for w in ws.values():
                    w.stop()
                job.kill()
    print("\ntree: named, median s (a miss counts as the whole wait), worst s, events before the fault")
    med = {}
    for k in dict.fromkeys(r[0] for r in rows):
        rs = [r for r in rows if r[0] == k]
        ts = [r[2] if r[2] is not None else a.wait for r in rs]
        med[k] = statistics.median(ts)
        print(f"  {k}: {sum(r[2] is not None for r in rs)}/{len(rs)}, median {med[k]:.1f}, worst {max(ts):.1f}, "
              f"early {sum(r[3] for r in rs)}")
    if len(med) == 2:
        mine, theirs = med[str(ROOT)], med[a.vs]
        print(f"median time to the verdict, this tree / {a.vs}: {mine / theirs:.2f}")


def healthy(a) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        job = TrainJob(Path(tmp), nproc=2, seconds=a.seconds + 120)
        ws = {}
        try:
            job.wait_ready()
            ws = watches(job.proc.pid, a.vs, "--deadline", str(a.seconds))
            t0 = time.monotonic()
            loads = []
            while time.monotonic() - t0 < a.seconds + 5 and any(w.proc.poll() is None for w in ws.values()):
                loads.append(os.getloadavg()[0])
                time.sleep(5)
            wall = time.monotonic() - t0
        finally:
            for w in ws.values():
                w.stop()
            job.kill()
    for k, w in ws.items():
        bad = [e for e in w.events if e["kind"] != "summary"]
        print(f"{k}: {len(bad)} event(s) in {wall:.0f} s healthy (load {min(loads):.1f}-{max(loads):.1f}): "
              f"{len(bad) * 3600 / wall:.1f} an hour" + "".join(f"\n    {e}" for e in bad), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("faults")
    f.add_argument("--seeds", type=int, default=3)
    f.add_argument("--first-seed", type=int, default=0)
    f.add_argument("--vs", default="/work/main")
    f.add_argument("--nice", type=int, default=-10, help="the hog's session's autogroup nice")
    f.add_argument("--wait", type=float, default=120)
    h = sub.add_parser("healthy")
    h.add_argument("--seconds", type=float, default=300)
    h.add_argument("--vs", default="/work/main")
    a = ap.parse_args()
    {"faults": faults, "healthy": healthy}[a.cmd](a)


if __name__ == "__main__":
    main()
