"""Bandwidth with nccl-tests' definitions (doc/PERFORMANCE.md in NVIDIA/nccl-tests).

algbw = bytes / time. busbw corrects for the algorithm so that it is comparable with the
hardware's link speed: for all_reduce every byte crosses 2(n-1)/n links, so
busbw = algbw * 2(n-1)/n; for broadcast busbw = algbw.
"""
from __future__ import annotations

import statistics
from typing import Iterable, Mapping, Sequence

GB = 1e9  # nccl-tests reports GB/s with 1 GB = 1e9 bytes


def bus_factor(op: str, world_size: int) -> float:
    if op == "all_reduce":
        return 2 * (world_size - 1) / world_size if world_size > 0 else 0.0
    return 1.0


def algbw(size: int, seconds: float) -> float:
    """GB/s."""
    return size / seconds / GB if seconds > 0 else 0.0


def busbw(op: str, size: int, seconds: float, world_size: int) -> float:
    return algbw(size, seconds) * bus_factor(op, world_size)


def median(times: Sequence[float]) -> float:
    return statistics.median(times) if times else 0.0


def world_rows(per_rank: Mapping[int, Iterable[Mapping]], world_size: int) -> list[dict]:
    """One row per size from every rank's `{"size", "times"}` entries.

    A collective finishes when its slowest participant does, so the world's time for a size is
    the largest of the ranks' medians.
    """
    by_size: dict[int, dict[int, float]] = {}
    for rank, entries in per_rank.items():
        for e in entries:
            by_size.setdefault(int(e["size"]), {})[rank] = median(e["times"])
    rows = []
    for size in sorted(by_size):
        meds = by_size[size]
        slowest = max(meds, key=meds.get)
        t = meds[slowest]
        rows.append({"op": "all_reduce", "size": size, "time_s": t, "slowest_rank": slowest,
                     "algbw_gbps": algbw(size, t), "busbw_gbps": busbw("all_reduce", size, t, world_size),
                     "ranks": len(meds)})
    return rows
