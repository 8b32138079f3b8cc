"""The smoke worker's bandwidth timing loop: all_reduce of one size, warm-up then timed iterations."""
from __future__ import annotations

import os
import time
from typing import Any, Callable, ContextManager

from ddpdoctor.smoke import plan as P

BENCH_VAR = "DDPDOCTOR_SMOKE_BENCH_REFERENCE"  # benchmarks/bench_smoke.py: also time a plain loop


def measure(torch, dist, size: int, device, waiting: Callable[[], ContextManager]) -> dict[str, Any]:
    """One size -> {"size", "warmup", "iters", "times"} (seconds per all_reduce)."""
    x = torch.zeros(max(1, size // 4), dtype=torch.float32, device=device)  # zeros: no overflow across iterations
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warmup, iters = P.bandwidth_iters(size)
    times = []
    with waiting():
        for _ in range(warmup):
            dist.all_reduce(x)
        sync()
        for _ in range(iters):
            t = time.perf_counter()
            dist.all_reduce(x)
            sync()
            times.append(time.perf_counter() - t)
    entry: dict[str, Any] = {"size": size, "warmup": warmup, "iters": iters, "times": [round(s, 7) for s in times]}
    if os.environ.get(BENCH_VAR):
        entry["reference_times"] = reference_loop(dist, x, warmup, iters, waiting)
    return entry


def reference_loop(dist, x, warmup: int, iters: int, waiting: Callable[[], ContextManager]) -> list[float]:
    """benchmarks/bench_smoke.py only: the plainest timing loop, on the same group, tensor and
    iteration counts, right after ddpdoctor's own measurement (CPU tensors: no sync needed)."""
    with waiting():
        for _ in range(warmup):
            dist.all_reduce(x)
        out = []
        for _ in range(iters):
            t = time.perf_counter()
            dist.all_reduce(x)
            out.append(time.perf_counter() - t)
    return out
