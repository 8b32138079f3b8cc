"""How long `ddpdoctor inspect` takes on a real hung torchrun + Gloo job of N ranks (target: 8 ranks < 3 s).

    python3 benchmarks/bench_inspect.py [--nproc 8] [--runs 3]

The time includes the interval between the two stack samples (--interval, 1 s by default) and
ddpdoctor's own start-up. The job is killed by its session afterwards.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "inspect_jobs" / "hang.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args()
    log = Path(f"/tmp/bench_inspect_{os.getpid()}.log")
    env = {**os.environ, "HANG_MODE": "other", "HANG_RANK": str(a.nproc - 1), "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={a.nproc}", str(JOB)], env=env, stdout=open(log, "w"),
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 300
        while log.read_text().count("ready ") < a.nproc:
            if time.monotonic() > end or job.poll() is not None:
                sys.exit(f"job did not get ready:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        time.sleep(1)
        times, out = [], ""
        for _ in range(a.runs):
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--pid", str(job.pid),
                                "--interval", str(a.interval)], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
            times.append(time.monotonic() - t0)
            out = p.stdout
        med = statistics.median(times)
        print(out)
        print(f"inspect on {a.nproc} ranks: median {med:.2f} s over {a.runs} runs "
              f"(min {min(times):.2f}, max {max(times):.2f}; interval {a.interval:g} s included); "
              f"target 3 s: {med / 3:.2f}x of budget -> {'OK' if med < 3 else 'OVER'}")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        for line in subprocess.run(["pgrep", "-f", str(JOB)], capture_output=True, text=True).stdout.split():
            try:
                os.killpg(os.getpgid(int(line)), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        job.wait()
        log.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
