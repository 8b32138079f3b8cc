"""How well and how fast `ddpdoctor explain --log` works.

    python benchmarks/bench_explain.py                # accuracy over tests/logs + throughput on 200 MB
    python benchmarks/bench_explain.py --size-mb 50   # a smaller throughput log
    python benchmarks/bench_explain.py --no-throughput -v

Accuracy: every log under tests/logs/<FAILURE_ID>/ should have that id as its top diagnosis
(top-1) or among the first three (top-3); logs under tests/logs/none/ should get no diagnosis.
Throughput: a generated log of realistic noise (training progress, NCCL INFO lines, warnings, a
few rank prefixes) with one real failure buried in the middle, scanned from a file; prints MB/s
and the peak memory of the scan.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor.logscan import explain_stream  # noqa: E402

LOGS = ROOT / "tests" / "logs"


def corpus() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(LOGS.glob("*/*.log")):
        out.append((path, path.parent.name))
    return out


def accuracy(verbose: bool) -> dict:
    """Top-1/top-3 per origin of the logs: "lab" (real captures) and "excerpt" (written from templates)."""
    by: dict[str, dict[str, int]] = {}
    clean_n = clean_ok = 0
    misses = []
    for path, expect in corpus():
        with open(path, "rb") as f:
            ids = [d.failure.id for d in explain_stream(f, str(path)).diagnoses]
        if expect == "none":
            clean_n += 1
            clean_ok += not ids
            if ids:
                misses.append((path, expect, ids[:3]))
            continue
        origin = path.name.split("-", 1)[0]
        c = by.setdefault(origin, {"logs": 0, "top1": 0, "top3": 0})
        c["logs"] += 1
        c["top1"] += bool(ids) and ids[0] == expect
        c["top3"] += expect in ids[:3]
        if not ids or ids[0] != expect:
            misses.append((path, expect, ids[:3]))
    if verbose:
        for path, expect, got in misses:
            print(f"  miss: {path.relative_to(LOGS)}: want {expect}, got {got or 'nothing'}")
    total = {k: sum(c[k] for c in by.values()) for k in ("logs", "top1", "top3")}
    return {"by_origin": by, "total": total, "clean_logs": clean_n, "clean_ok": clean_ok,
            "failure_ids": len({e for _, e in corpus() if e != "none"})}


_NOISE = [
    "{{'loss': {loss:.4f}, 'learning_rate': {lr:.2e}, 'epoch': {ep:.2f}}}",
    "Epoch {e}:  {p}%|#####     | {i}/5000 [12:{s:02d}<20:11,  4.12it/s, loss={loss:.3f}, v_num=3]",
    "[rank{r}]:[W reducer.cpp:1389] Warning: find_unused_parameters=True was specified in DDP constructor, "
    "but did not find any unused parameters in the forward pass. (function operator())",
    "node{n}:{pid}:{pid} [{r}] NCCL INFO Channel {c:02d}/0 : {r}[{r}] -> {r2}[{r2}] via P2P/IPC/read",
    "node{n}:{pid}:{pid} [{r}] NCCL INFO Connected all rings",
    "{ts} | INFO | train.py:211 | step {i} | tokens/s {tok} | grad_norm {g:.3f} | mem {m} MiB",
    "/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:90: UserWarning: None of the inputs have "
    "requires_grad=True. Gradients will be None",
    "[2024-05-01 10:{s:02d}:11,123] [INFO] [logging.py:96:log_dist] [Rank 0] step={i}, skipped=0, lr=[{lr:.6f}], "
    "mom=[(0.9, 0.95)]",
]
_FAILURE = [
    "[W1121 05:20:53.99 socket.cpp:764] [c10d] The IPv6 network addresses of (node7, 29500) cannot be retrieved "
    "(gai error: -2 - Name or service not known).",
    "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=99, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds "
    "before timing out.",
]


def make_log(path: str, size_mb: float, seed: int = 7) -> int:
    rnd = random.Random(seed)
    target = int(size_mb * 1e6)
    written = 0
    inserted = False
    with open(path, "w") as f:
        while written < target:
            lines = []
            for _ in range(2000):
                t = rnd.choice(_NOISE)
                r = rnd.randrange(8)
                lines.append(t.format(loss=rnd.random() * 3, lr=rnd.random() * 1e-4, ep=rnd.random() * 3,
                                      e=rnd.randrange(10), p=rnd.randrange(100), i=rnd.randrange(5000),
                                      s=rnd.randrange(60), r=r, r2=(r + 1) % 8, n=rnd.randrange(1, 5),
                                      pid=rnd.randrange(1000, 99999), c=rnd.randrange(32),
                                      ts="2024-05-01 10:00:00", tok=rnd.randrange(10**5, 10**6),
                                      g=rnd.random(), m=rnd.randrange(10000, 80000)))
            if not inserted and written > target // 2:
                lines += _FAILURE
                inserted = True
            chunk = "\n".join(lines) + "\n"
            f.write(chunk)
            written += len(chunk)
    return written


def throughput(size_mb: float) -> dict:
    fd, path = tempfile.mkstemp(prefix="ddpdoctor-bench-", suffix=".log")
    os.close(fd)
    try:
        size = make_log(path, size_mb)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            ex = explain_stream(f, path)
        dt = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return {"mb": size / 1e6, "seconds": dt, "mb_per_s": size / 1e6 / dt, "lines": ex.lines,
                "top": ex.diagnoses[0].failure.id if ex.diagnoses else None,
                "peak_rss_growth_mb": max(0, rss1 - rss0) / 1024}
    finally:
        os.unlink(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--no-throughput", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the logs that miss top-1")
    a = ap.parse_args()
    acc = accuracy(a.verbose)
    t = acc["total"]
    print(f"corpus: {t['logs']} failure logs covering {acc['failure_ids']} failure ids, {acc['clean_logs']} clean logs")
    for origin, c in sorted(acc["by_origin"].items()) + [("all", t)]:
        n = c["logs"] or 1
        print(f"  {origin:<8} top-1 {c['top1']:>3}/{c['logs']:<3} = {c['top1'] / n:6.1%}   "
              f"top-3 {c['top3']:>3}/{c['logs']:<3} = {c['top3'] / n:6.1%}")
    print(f"  clean logs without a diagnosis: {acc['clean_ok']}/{acc['clean_logs']}")
    if not a.no_throughput:
        t = throughput(a.size_mb)
        print(f"throughput: {t['mb']:.0f} MB, {t['lines']:,} lines in {t['seconds']:.2f} s = {t['mb_per_s']:.0f} MB/s "
              f"(peak RSS growth {t['peak_rss_growth_mb']:.0f} MB; found {t['top']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
