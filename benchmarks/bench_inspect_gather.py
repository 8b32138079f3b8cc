"""`srun --overlap ... ddpdoctor inspect --gather` wall time over N Slurm lab nodes (tests/slurmlab.py).

Each node runs a real slurmd in a network and pid namespace of its own (SlurmLab(pid_ns=True)), and
one Python "rank" of a job (a sleeper with RANK/WORLD_SIZE set, light enough for 16 nodes on this
machine; tests/test_inspect_gather_lab.py proves the verdict on a real hung Gloo job). All nodes
share this machine's CPUs. Printed per size: wall time of the srun from the head node, and per node
(median / max) when its view was ready to send (since the process started) and its sample phase
(py-spy x2, 1 s apart). For comparison, the first version met through torch's TCPStore (an
`import torch` per node): 2/4/8/16 nodes took 3.2/6.6/13.5/25.8 s here.

    python benchmarks/bench_inspect_gather.py [--sizes 2 4 8 16]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lab import Lab  # noqa: E402
from slurmlab import DD, REPO_ROOT, SlurmLab  # noqa: E402

RANK = ('export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=node1 '
        'MASTER_PORT=29510; exec "$0" -c "import time; print(\'ready\', flush=True); time.sleep(600)"')


def sleeping_job(lab, slurm, n: int, rank: str = RANK, timeout: float = 120, per_node: int = 1) -> tuple[subprocess.Popen, str]:
    """`srun -N n` `per_node` sleeping "ranks" per node; (the srun, the Slurm job id) once every rank is up."""
    log = slurm.dir / "job.out"
    with open(log, "w") as f:
        job = lab.popen("head", ["srun", "-J", "bench", "-N", str(n), "--ntasks-per-node", str(per_node), "sh", "-c",
                                 rank, sys.executable], env=slurm.env, stdout=f, stderr=subprocess.STDOUT)
    end = time.monotonic() + timeout
    while log.read_text().count("ready") < n * per_node:
        if time.monotonic() > end or job.poll() is not None:
            raise SystemExit(f"job did not start on {n} nodes:\n{log.read_text()[-2000:]}")
        time.sleep(0.3)
    return job, slurm.run(["squeue", "-h", "-o", "%i", "-n", "bench"], timeout=15).stdout.split()[0]


def one(n: int, repeat: int) -> dict:
    names = [f"node{i}" for i in range(1, n + 1)]
    with Lab(("head", *names)) as lab, SlurmLab(lab, pid_ns=True) as slurm:
        job, jobid = sleeping_job(lab, slurm, n)
        walls, reps = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            r = slurm.srun("--jobid", jobid, "--overlap", "-N", str(n), "--ntasks-per-node", "1", *DD, "inspect",
                           "--gather", "--json", "--no-gpu", "--deadline", "60",
                           env={"PYTHONPATH": str(REPO_ROOT)}, timeout=120)
            walls.append(time.perf_counter() - t0)
            reps.append(json.loads(r.stdout))
        lab.kill(job)
    rep = reps[-1]
    nodes = [x for x in rep["nodes"] if x["reported"]]
    return {"n": n, "wall": statistics.median(walls), "reported": len(nodes), "ranks": len(rep["ranks"]),
            "sent": statistics.median(x["since_start_s"] for x in nodes), "sent_max": max(x["since_start_s"] for x in nodes),
            "sample": statistics.median(x["took_s"] for x in nodes), "sample_max": max(x["took_s"] for x in nodes)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"{os.cpu_count()} CPUs shared by every lab node; times in seconds; goal: 16 nodes < 10 s")
    print(f"{'nodes':>5} {'reported':>8} {'ranks':>5} {'wall':>6} {'view ready med/max':>19} {'sample med/max':>15}")
    for n in a.sizes:
        r = one(n, a.repeat)
        print(f"{n:>5} {r['reported']:>8} {r['ranks']:>5} {r['wall']:6.2f} {r['sent']:9.2f}/{r['sent_max']:<9.2f} "
              f"{r['sample']:6.2f}/{r['sample_max']:<7.2f}", flush=True)


if __name__ == "__main__":
    main()
