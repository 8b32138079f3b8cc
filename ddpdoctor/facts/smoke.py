"""The smoke world: typed facts the DD4xx/DD5xx/DD8xx checks of `ddpdoctor smoke` read (the `ctx`).

Built by ddpdoctor/smoke/report.py from the JSON rank 0's worker sends (ddpdoctor/smoke/worker.py):
one RankRecord per rank that reported, and the watchdog's verdict when the run stalled. The JSON
report (docs/json-schema.md) carries each record unchanged (`RankRecord.raw`).

Left as plain data, because they are probe output passed through: a correctness entry, a
bandwidth entry, an NVML snapshot (ddpdoctor/probes/nvml.py) and the verdict's per-rank states
(ddpdoctor/smoke/progress.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from ddpdoctor.facts import EnvContext


@dataclass(frozen=True)
class RankError:
    """The phase a rank failed in, the exception in one line, and where to look."""
    phase: str
    message: str
    hint: str = ""

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GpuView:
    """What NVML showed one rank: which GPU it should use, and its host's GPUs at each stage."""
    available: bool = False
    error: str = ""
    driver: str | None = None
    expected: Mapping[str, Any] = field(default_factory=dict)  # {"index", "uuid", "how"}
    snapshots: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)  # stage -> NVML GPUs

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> GpuView | None:
        if not d:
            return None
        nv = d.get("nvml") or {}
        return cls(bool(nv.get("available")), nv.get("error") or "", nv.get("driver"),
                   dict(d.get("expected") or {}), dict(d.get("snapshots") or {}))


@dataclass(frozen=True)
class RankRecord:
    """One rank's record: where it ran, what it measured, how it failed."""
    rank: int
    host: str = "?"
    pid: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None
    launcher: str = ""
    device: str = "?"
    device_uuid: str | None = None
    gpu_name: str | None = None
    has_gpu: bool = False
    backend: str = ""
    versions: Mapping[str, str | None] = field(default_factory=dict)  # python, torch, cuda, nccl, driver
    settings: Mapping[str, str] = field(default_factory=dict)  # NCCL_*/GLOO_*/... as the rank saw them
    phases: Mapping[str, float] = field(default_factory=dict)  # phase category -> seconds
    correctness: tuple[Mapping[str, Any], ...] = ()  # {"op", "dtype", "size", "src", "ok", "first_bad"?, ...}
    bandwidth: tuple[Mapping[str, Any], ...] = ()  # {"size", "warmup", "iters", "times"}
    gloo_cpu: Mapping[str, Any] | None = None  # {"ok", "error"?}: Gloo next to NCCL
    gpu: GpuView | None = None
    error: RankError | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)  # the worker's JSON

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RankRecord:
        err = d.get("error")
        return cls(
            rank=int(d["rank"]), host=d.get("host") or "?", pid=d.get("pid"), local_rank=d.get("local_rank"),
            local_world_size=d.get("local_world_size"), launcher=d.get("launcher") or "", device=d.get("device") or "?",
            device_uuid=d.get("device_uuid"), gpu_name=d.get("gpu_name"), has_gpu=bool(d.get("has_gpu")),
            backend=d.get("backend") or "", versions=dict(d.get("versions") or {}),
            settings=dict(d.get("settings") or {}), phases=dict(d.get("phases") or {}),
            correctness=tuple(d.get("correctness") or ()), bandwidth=tuple(d.get("bandwidth") or ()),
            gloo_cpu=d.get("gloo_cpu"), gpu=GpuView.from_dict(d.get("gpu")),
            error=RankError(err.get("phase", ""), err.get("message", ""), err.get("hint", "")) if err else None,
            raw=d)


def records_of(world: Mapping[str, Any] | None) -> dict[int, RankRecord]:
    """rank -> record, from a world's `records` (JSON keys are strings; empty records are left out)."""
    out = {}
    for k, v in ((world or {}).get("records") or {}).items():
        if v:
            out[int(k)] = RankRecord.from_dict(v if "rank" in v else {"rank": int(k), **v})
    return out


@dataclass(frozen=True)
class SmokeWorld(EnvContext):
    """What the checks of `smoke` read: every rank's record, the watchdog's verdict, the --fix re-run."""
    cfg: Any  # ddpdoctor.smoke.plan.SmokeConfig (facts import no feature package)
    world_size: int
    backend: str = ""
    records: Mapping[int, RankRecord] = field(default_factory=dict)
    verdict: Mapping[str, Any] | None = None  # {"kind", "late", "after_s", "detected_by", "states": [...]}
    fix_records: Mapping[int, RankRecord] = field(default_factory=dict)  # the --fix re-run's records
    fix_run: bool = False  # a --fix re-run happened (its records may still be empty)
    env: Mapping[str, str] = field(default_factory=dict)
    master: str | None = None  # DD801 compares MASTER_ADDR/PORT with these (None: standalone)
    port: int | None = None

    @classmethod
    def from_worker(cls, world: Mapping[str, Any], cfg: Any, *, fix_world: Mapping | None = None,
                    env: Mapping[str, str] | None = None, master: str | None = None,
                    port: int | None = None) -> SmokeWorld:
        records = records_of(world)
        backend = world.get("backend") or next((r.backend for r in records.values() if r.backend), "")
        return cls(cfg, int(world.get("world_size") or len(records)), backend, records, world.get("verdict"),
                   records_of(fix_world), bool(fix_world), dict(env or {}), master, port)
