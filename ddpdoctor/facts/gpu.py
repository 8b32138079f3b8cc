"""GPU facts derived from the NVML snapshots every rank of `ddpdoctor smoke` took (plain data, no judgement).

Per rank: its host and pid, the GPU it should use (`expected`: NVML index and UUID), and NVML
snapshots of its host at each of STAGES. The torch worker (--fix) and the DD4xx checks both read them.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ddpdoctor.facts.smoke import GpuView, RankRecord

STAGES = ("before init", "after init", "after first collective")
_NONE = GpuView()


def gpu_info(rec: RankRecord) -> GpuView:
    return rec.gpu or _NONE


def nvml_available(records: Mapping[int, RankRecord]) -> tuple[bool, str]:
    reasons = set()
    for rec in records.values():
        nv = gpu_info(rec)
        if nv.available:
            return True, ""
        if nv.error:
            reasons.add(nv.error)
    return False, "; ".join(sorted(reasons)) or "no rank reported NVML data"


def misplaced(records: Mapping[int, RankRecord]) -> list[dict[str, Any]]:
    """Every (rank, GPU) where the rank's own pid holds memory on a GPU that is not its own.

    Each entry holds the stage it was first seen at (what caused it) and the latest bytes held.
    """
    out = []
    for r in sorted(records):
        rec = records[r]
        g = gpu_info(rec)
        own = g.expected.get("uuid")
        if not own:
            continue
        seen: dict[str, dict[str, Any]] = {}
        for stage in STAGES:
            for gpu in g.snapshots.get(stage) or []:
                if gpu["uuid"] == own:
                    continue
                for p in gpu.get("processes", []):
                    if p["pid"] == rec.pid:
                        first = seen.get(gpu["uuid"], {}).get("first_stage", stage)
                        seen[gpu["uuid"]] = {"rank": r, "pid": p["pid"], "host": rec.host, "gpu": gpu["index"],
                                             "uuid": gpu["uuid"], "used": p.get("used"), "stage": stage,
                                             "first_stage": first, "own_gpu": g.expected.get("index")}
        out += list(seen.values())
    return out


def rank_usage(rec: RankRecord) -> list[dict[str, Any]]:
    """Where the rank's own pid holds memory in its latest NVML snapshot: GPU index, UUID, bytes."""
    snaps = gpu_info(rec).snapshots
    latest = next((snaps[s] for s in reversed(STAGES) if snaps.get(s)), [])
    return [{"gpu": gpu["index"], "uuid": gpu["uuid"], "used": p.get("used") or 0}
            for gpu in latest for p in gpu.get("processes", []) if p["pid"] == rec.pid]


def job_memory_per_gpu(records: Mapping[int, RankRecord]) -> dict[tuple, dict[str, Any]]:
    """(host, GPU index) -> bytes the job's ranks hold there and how many, at the latest stage."""
    out: dict[tuple, dict[str, Any]] = {}
    for rec in records.values():
        for u in rank_usage(rec):
            e = out.setdefault((rec.host, u["gpu"]), {"used": 0, "ranks": []})
            e["used"] += u["used"]
            e["ranks"].append(rec.rank)
    return out


def visible_gpu(local_rank: int, cuda_visible_devices: str | None, gpus: Sequence[dict]) -> dict[str, Any]:
    """The NVML GPU that `cuda:<local_rank>` names in a process with this CUDA_VISIBLE_DEVICES.

    CUDA_VISIBLE_DEVICES lists NVML indices or UUID prefixes (`GPU-8a2f...`); unset means all
    GPUs. CUDA's default order (CUDA_DEVICE_ORDER=FASTEST_FIRST) can differ from NVML's PCI order
    on hosts that mix GPU models: a rank that initialised CUDA reports the UUID torch sees, which
    wins over this guess.
    """
    none = {"index": None, "uuid": None, "how": ""}
    if cuda_visible_devices is None:
        entry, how = str(local_rank), f"local rank {local_rank}"
    else:
        parts = [p.strip() for p in cuda_visible_devices.split(",") if p.strip()]
        if local_rank >= len(parts):
            return {**none, "how": f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} has no entry {local_rank}"}
        entry, how = parts[local_rank], f"CUDA_VISIBLE_DEVICES={cuda_visible_devices} entry {local_rank}"
    for g in gpus:
        if (entry.isdecimal() and int(entry) == g["index"]) or (not entry.isdecimal() and g["uuid"].startswith(entry)):
            return {"index": g["index"], "uuid": g["uuid"], "how": how}
    return {**none, "how": f"{how}: no such GPU"}
