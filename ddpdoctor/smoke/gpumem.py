"""The smoke worker's NVML snapshots: which GPUs this rank sees, which it should use, and their
memory and processes at each stage (DD4xx judge them in the supervisor)."""
from __future__ import annotations

import os
from typing import Any

from ddpdoctor.smoke import plan as P


def first_snapshot(local_rank: int) -> tuple[dict[str, Any], str | None]:
    """Before anything can touch CUDA (is_available() creates no context) -> (the record's "gpu", driver)."""
    from ddpdoctor.facts.gpu import visible_gpu
    from ddpdoctor.probes.nvml import snapshot
    snap = snapshot()
    gpus = snap.to_dict()["gpus"]
    gpu = {"nvml": {"available": snap.available, "error": snap.error, "driver": snap.driver},
           "expected": visible_gpu(local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus),
           "snapshots": {P.NVML_BEFORE: gpus}}
    return gpu, snap.driver


def add_snapshot(gpu: dict[str, Any] | None, stage: str) -> None:
    """Add the snapshot of `stage` to the record's "gpu" (nothing when there is none)."""
    if gpu is None:
        return
    from ddpdoctor.probes.nvml import snapshot
    snap = snapshot().to_dict()
    gpu["snapshots"][stage] = snap["gpus"] if snap["available"] else []


def device_uuid(props) -> str | None:
    uuid = str(getattr(props, "uuid", "") or "")
    if not uuid:
        return None
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def pin_expected(gpu: dict[str, Any], uuid: str, local_rank: int) -> None:
    """The UUID CUDA reports beats the CUDA_VISIBLE_DEVICES guess of which GPU this rank uses."""
    exp = gpu["expected"]
    for g in gpu["snapshots"][P.NVML_BEFORE]:
        if g["uuid"] == uuid:
            exp.update(index=g["index"], uuid=g["uuid"], how=f"torch: cuda:{local_rank} is {g['uuid']}")
