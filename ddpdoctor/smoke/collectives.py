"""The smoke worker's correctness steps: one all_reduce / broadcast / barrier each, with the result
compared to the value every rank can compute (ddpdoctor/smoke/plan.py), and the Gloo group next to NCCL."""
from __future__ import annotations

import time
from typing import Any, Callable, ContextManager

from ddpdoctor.smoke import plan as P


def short_error(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:400]}"


def failure_hint(e: BaseException) -> str:
    """Where to look when a collective raised (a peer's fault, not this rank's, most of the time)."""
    text = str(e)
    if "closed by peer" in text or "Connection reset" in text:
        return "a peer rank went away in the middle of the collective"
    if "Timed out" in text or "timeout" in text.lower():
        return "a peer never took part in the collective"
    return ""


def run_step(torch, dist, step: P.Step, device, rank: int, world: int, local_rank: int, fix_round: bool,
             zero: bool, waiting: Callable[[], ContextManager]) -> dict[str, Any]:
    """One correctness step -> its record entry (ok, first_bad, time_s). `zero`: contribute zeros (fault hook)."""
    t = time.perf_counter()
    entry: dict[str, Any] = {"op": step.op, "dtype": step.dtype, "size": step.size, "src": step.src}
    if step.op == "barrier":
        with waiting():
            if device.type == "cuda" and fix_round:
                dist.barrier(device_ids=[local_rank])
            else:
                dist.barrier()
        entry.update(ok=True, time_s=round(time.perf_counter() - t, 6))
        return entry
    dtype = getattr(torch, step.dtype)
    n = max(1, step.size // torch.empty((), dtype=dtype).element_size())
    if step.op == "all_reduce":
        value, expected, ones = P.contribution(rank, world, step.dtype)
        if zero:
            value = 0
        x = torch.full((n,), value, dtype=dtype, device=device)
        with waiting():
            dist.all_reduce(x)
        entry["ones"] = ones
    else:
        expected = step.src + 1
        x = torch.full((n,), expected if rank == step.src else 0, dtype=dtype, device=device)
        with waiting():
            dist.broadcast(x, step.src)
    bad = x != expected
    if bool(bad.any()):
        i = int(bad.nonzero()[0].item())
        entry.update(ok=False, first_bad={"index": i, "got": x[i].item(), "expected": expected})
    else:
        entry["ok"] = True
    entry["time_s"] = round(time.perf_counter() - t, 6)
    return entry


def gloo_next_to_nccl(torch, dist, rank: int, world: int, waiting: Callable[[], ContextManager]) -> dict[str, Any]:
    """A CPU all_reduce on a Gloo group beside the NCCL one (DD506 judges it) -> {"ok", "error"?}."""
    try:
        x = torch.full((4,), float(rank + 1))
        with waiting():
            g = dist.new_group(backend="gloo")
            dist.all_reduce(x, group=g)
        expected = world * (world + 1) / 2
        return {"ok": bool((x == expected).all())}
    except Exception as e:  # noqa: BLE001 - DD506 reports it; the NCCL part goes on
        return {"ok": False, "error": short_error(e)}
