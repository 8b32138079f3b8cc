"""What `ddpdoctor prolog` costs every job start: median wall time beside `python -c pass` and
`python -m torch.utils.collect_env`, and (as root, with Slurm installed) the extra time a real
`srun -N 2 true` takes with Prolog=ddpdoctor against an empty Prolog.

Target: the prolog under 0.5 s on a healthy node, and it never imports torch.
Run: python benchmarks/bench_prolog.py [--runs 11] [--no-lab]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
TARGET_S = 0.5


def wall(argv, runs: int, env=None) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, env=env)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def imports_torch() -> bool:
    code = ("import sys, runpy\nsys.argv = ['ddpdoctor', 'prolog']\n"
            "try:\n    runpy.run_module('ddpdoctor', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return p.stderr.strip().splitlines()[-1] == "True"


def in_slurm(runs: int) -> tuple[float, float, float] | None:
    """(srun with an empty Prolog, srun with ddpdoctor's, the prolog inside a lab node) medians."""
    from lab import Lab, lab_available
    from slurmlab import DD, SlurmLab, slurm_available
    if not (lab_available()[0] and slurm_available()[0]):
        return None
    with Lab(("head", "node1", "node2")) as lab, SlurmLab(lab) as slurm:
        def srun_times():
            out = []
            for _ in range(runs):
                t0 = time.perf_counter()
                r = slurm.srun("-N", "2", "true", timeout=60)
                out.append(time.perf_counter() - t0)
                assert r.returncode == 0, r.stderr
            return statistics.median(out)
        slurm.srun("-N", "2", "true")  # warm-up
        bare = srun_times()
        slurm.set_prolog([*DD, "prolog"])
        with_prolog = srun_times()
        env = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURMD_NODENAME": "node2", "SLURM_JOB_ID": "1"}
        node = []
        for _ in range(runs):
            t0 = time.perf_counter()
            lab.run("node2", [*DD, "prolog"], env=env, timeout=30)
            node.append(time.perf_counter() - t0)
        return bare, with_prolog, statistics.median(node)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--no-lab", action="store_true", help="skip the real-Slurm measurement")
    a = ap.parse_args()
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    pas = wall([py, "-c", "pass"], a.runs, env)
    pro = wall([py, "-m", "ddpdoctor", "prolog"], a.runs, env)
    col = wall([py, "-m", "torch.utils.collect_env"], max(3, a.runs // 4), env)
    print(f"median wall time ({a.runs} runs; collect_env {max(3, a.runs // 4)}), {os.cpu_count()} CPUs")
    print(f"  python -c pass                       {pas * 1000:7.0f} ms")
    print(f"  ddpdoctor prolog (this host)         {pro * 1000:7.0f} ms   {pro / pas:5.1f}x python -c pass")
    print(f"  python -m torch.utils.collect_env    {col * 1000:7.0f} ms   {col / pro:5.1f}x ddpdoctor prolog")
    print(f"  ddpdoctor prolog imports torch: {imports_torch()}")
    if not a.no_lab and os.geteuid() == 0:
        got = in_slurm(a.runs)
        if got is None:
            print("  (no lab / Slurm here: skipped the srun measurement)")
        else:
            bare, with_prolog, node = got
            print(f"  prolog inside a lab node (2-node job) {node * 1000:7.0f} ms")
            print(f"  srun -N 2 true, empty Prolog          {bare * 1000:7.0f} ms")
            print(f"  srun -N 2 true, Prolog=ddpdoctor      {with_prolog * 1000:7.0f} ms   "
                  f"(+{(with_prolog - bare) * 1000:.0f} ms per job start)")
    print(f"prolog {pro:.2f} s (target < {TARGET_S} s): {'OK' if pro < TARGET_S else 'MISSED'}")


if __name__ == "__main__":
    main()
