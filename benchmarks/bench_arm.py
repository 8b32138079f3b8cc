"""What arming costs: a Gloo DDP training loop's step time with and without `ddpdoctor arm`'s exports.

    python3 benchmarks/bench_arm.py [--nproc 2] [--steps 300] [--rounds 3]

Each round runs the same torchrun job twice (plain, armed), alternating, and compares the median step
time of the ranks (after 20 warm-up steps). Goal: < 1 % overhead. On a loaded machine, read the spread
between rounds as the noise floor.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = r'''
import os, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
m = DDP(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
steps = int(os.environ["BENCH_STEPS"]); ts = []
tiny = torch.ones(1)
for i in range(steps):
    t0 = time.perf_counter()
    if os.environ.get("BENCH_WORK") == "tiny":  # worst case: one 4-byte all_reduce per step, all recorder
        dist.all_reduce(tiny)
    else:
        opt.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
    ts.append(time.perf_counter() - t0)
ts = sorted(ts[20:])
if dist.get_rank() == 0:
    print("MEDIAN", ts[len(ts) // 2], flush=True)
dist.destroy_process_group()
'''


WORK = ["ddp"]


def run(nproc: int, steps: int, env_extra: dict[str, str], script: str) -> float:
    env = {**os.environ, "BENCH_STEPS": str(steps), "OMP_NUM_THREADS": "1", "BENCH_WORK": WORK[0], **env_extra}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                        script], env=env, capture_output=True, text=True, timeout=600)
    line = next((l for l in p.stdout.splitlines() if l.startswith("MEDIAN")), None)
    if line is None:
        sys.exit(p.stdout[-2000:] + p.stderr[-2000:])
    return float(line.split()[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", choices=["ddp", "tiny"], default="ddp",
                    help="ddp: a DDP MLP step; tiny: one 4-byte all_reduce per step (the recorder's worst case)")
    a = ap.parse_args()
    WORK[0] = a.work
    sys.path.insert(0, str(ROOT))
    from ddpdoctor.inspect.arm import arm_vars
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "loop.py")
        Path(script).write_text(LOOP)
        armed = arm_vars({k: v for k, v in os.environ.items()}, directory=d)
        plain, arm = [], []
        for _ in range(a.rounds):
            plain.append(run(a.nproc, a.steps, {}, script))
            arm.append(run(a.nproc, a.steps, armed, script))
    p, q = statistics.median(plain), statistics.median(arm)
    ratios = sorted(y / x for x, y in zip(plain, arm))  # each round's pair ran back to back: same load
    print(f"{a.work} step time, {a.nproc} Gloo ranks, median of {a.rounds} rounds: plain {p * 1e3:.3f} ms, "
          f"armed {q * 1e3:.3f} ms -> armed/plain {q / p:.3f} ({(q / p - 1) * 100:+.1f} %; goal < +1 %); "
          f"paired ratios median {statistics.median(ratios):.3f} (range {ratios[0]:.3f}-{ratios[-1]:.3f})")
    print("  rounds plain ms:", " ".join(f"{x * 1e3:.3f}" for x in plain), "| armed ms:",
          " ".join(f"{x * 1e3:.3f}" for x in arm))


if __name__ == "__main__":
    main()
