"""Start-up cost: `ddpdoctor --help` and `ddpdoctor network` vs `python -c "import torch"`.

Target: --help under a third of the time of importing torch, and neither command imports torch.
Run: python benchmarks/bench_startup.py [--runs 7]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def wall(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def imports_torch(args: list[str]) -> bool:
    code = ("import sys, runpy\nsys.argv = ['ddpdoctor'] + %r\n"
            "try:\n    runpy.run_module('ddpdoctor', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)") % (args,)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return p.stderr.strip().splitlines()[-1] == "True"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    py = sys.executable
    rows = [
        ("python -c pass", [py, "-c", "pass"]),
        ("python -c 'import torch'", [py, "-c", "import torch"]),
        ("ddpdoctor --help", [py, "-m", "ddpdoctor", "--help"]),
        ("ddpdoctor network (this host)", [py, "-m", "ddpdoctor", "network"]),
    ]
    res = {name: wall(argv, a.runs) for name, argv in rows}
    torch_t = res["python -c 'import torch'"]
    print(f"median of {a.runs} runs")
    for name, t in res.items():
        print(f"  {name:<32} {t * 1000:7.0f} ms   {t / torch_t:5.2f}x of import torch")
    for args in (["--help"], ["network"]):
        print(f"  ddpdoctor {' '.join(args):<22} imports torch: {imports_torch(args)}")
    ratio = res["ddpdoctor --help"] / torch_t
    print(f"--help / import torch = {ratio:.2f} (target < 0.33): {'OK' if ratio < 1 / 3 else 'MISSED'}")


if __name__ == "__main__":
    main()
