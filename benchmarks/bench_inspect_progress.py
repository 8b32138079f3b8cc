"""False hangs on a healthy job: how often `inspect` calls a REAL torchrun + Gloo job looping on small
all_reduces (tests/inspect_jobs/tight_loop.py, hundreds a second) stuck. Goal: 0.

    python3 benchmarks/bench_inspect_progress.py [--runs 10] [--nproc 4 --numel 65536] [--tree CHECKOUT ...]

--tree runs another checkout's inspect on the same job (e.g. the main branch, for a before/after).
Prints the runs that exited 1 and the findings they gave.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "inspect_jobs" / "tight_loop.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--nproc", type=int, default=2, help="ranks (4 with --numel 65536 reproduces issue 22's false hang)")
    ap.add_argument("--numel", type=int, default=8, help="floats per all_reduce (65536: most time inside it)")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds the loop runs before the first inspect")
    ap.add_argument("--tree", action="append", default=[], help="checkouts to compare (default: this one)")
    a = ap.parse_args()
    trees = a.tree or [str(ROOT)]
    log = Path(f"/tmp/bench_inspect_progress_{os.getpid()}.log")
    env = {**os.environ, "TIGHT_SECONDS": str(30 + a.settle + 12 * a.runs * len(trees)), "OMP_NUM_THREADS": "1", "TIGHT_NUMEL": str(a.numel)}
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={a.nproc}", str(JOB)],
                           env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 90
        while log.read_text().count("ready ") < a.nproc:
            if time.monotonic() > end or job.poll() is not None:
                sys.exit(f"job did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.3)
        time.sleep(a.settle)
        for tree in trees:
            hung = []
            for _ in range(a.runs):
                p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--pid", str(job.pid), "--json",
                                    "--no-gpu"], capture_output=True, text=True, timeout=60,
                                   env={**os.environ, "PYTHONPATH": tree}, cwd=tree)  # -m puts the cwd first
                if p.returncode != 0:
                    rep = json.loads(p.stdout) if p.stdout.strip() else {}
                    hung.append([f["message"] for r in rep.get("results", []) for f in r["findings"]][:1])
            print(f"{tree}: {len(hung)} of {a.runs} inspects called the healthy job stuck")
            for h in hung[:3]:
                print(f"    {h}")
    finally:
        import psutil
        try:  # torchrun's workers run in sessions of their own: kill the tree by pid
            tree_pids = [c.pid for c in psutil.Process(job.pid).children(recursive=True)]
        except psutil.Error:
            tree_pids = []
        for pid in [job.pid, *tree_pids]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.wait(10)


if __name__ == "__main__":
    main()
