"""The smoke world: typed facts the DD4xx/DD5xx/DD8xx checks of `ddpdoctor smoke` read (the `ctx`).

Built by ddpdoctor/smoke/report.py from the JSON rank 0's worker sends (ddpdoctor/smoke/worker.py):
one RankRecord per rank that reported, and the watchdog's verdict when the run stalled. The JSON
report (docs/json-schema.md) carries each record unchanged (`RankRecord.raw`).

Typed once, here, as the JSON arrives: a correctness entry (CollectiveResult), the Gloo-next-to-NCCL
check (GlooCheck), the watchdog's verdict (Verdict) with every rank's state (RankState,
ddpdoctor/smoke/progress.py). Each keeps the JSON it came from (`raw`): findings quote it as evidence
and the JSON report carries it unchanged. Left as plain data: a bandwidth entry (facts/bandwidth.py
does its maths) and an NVML snapshot (ddpdoctor/probes/nvml.py).
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
class FirstBad:
    """The first element a collective got wrong on one rank (smoke/collectives.py)."""
    index: int | None = None
    got: float | None = None
    expected: float | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FirstBad:
        return cls(d.get("index"), d.get("got"), d.get("expected"), d)


@dataclass(frozen=True)
class CollectiveResult:
    """One collective of the correctness pass on one rank, compared exactly."""
    op: str
    dtype: str = ""
    size: int = 0
    src: int = 0
    ok: bool = False
    ones: bool = False  # bfloat16 past 256: every rank sent 1 (smoke/plan.py contribution)
    error: str = ""
    first_bad: FirstBad = field(default_factory=FirstBad)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CollectiveResult:
        return cls(d["op"], d.get("dtype", ""), d.get("size", 0), d.get("src", 0), bool(d.get("ok")),
                   bool(d.get("ones")), d.get("error", ""), FirstBad.from_dict(d.get("first_bad") or {}), d)


@dataclass(frozen=True)
class GlooCheck:
    """A Gloo group's all_reduce next to NCCL (DD506)."""
    ok: bool
    error: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> GlooCheck | None:
        if not d:
            return None
        return cls(bool(d.get("ok")), d.get("error"), d)


@dataclass(frozen=True)
class RankState:
    """One rank as the watchdog saw it when the run stalled (smoke/progress.py RankState.to_dict; a rank
    never seen has `seen` False, and its pid, host and process state when its supervisor knew them)."""
    rank: int
    seen: bool = False
    host: str | None = "?"
    pid: int | None = None
    phase: str | None = None
    index: int = -1
    in_phase_s: float | None = None
    heartbeat_age_s: float | None = None
    waited_s: float = 0
    error: str | None = None
    exit: str | None = None
    proc_state: str | None = None  # stopped | zombie | gone | sleeping | running (on the rank's host)
    in_collective: bool = False
    relayed: bool = False  # as rank 0 last saw it before it froze: context, not evidence
    ended_by_ddpdoctor: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RankState:
        return cls(int(d["rank"]), bool(d.get("seen")), d.get("host", "?"), d.get("pid"), d.get("phase"),
                   d.get("index", -1), d.get("in_phase_s"), d.get("heartbeat_age_s"), d.get("waited_s", 0),
                   d.get("error"), d.get("exit"), d.get("proc_state"), bool(d.get("in_collective")),
                   bool(d.get("relayed")), d.get("ended_by_ddpdoctor"), d)

    @property
    def silent_s(self) -> float:
        """Seconds since its last heartbeat (0 when unknown)."""
        return self.heartbeat_age_s or 0


@dataclass(frozen=True)
class Verdict:
    """Why the watchdog stopped the run (smoke/progress.py make_verdict): every rank's state then."""
    kind: str  # stall | error | terminated
    after_s: float
    detected_by: str
    timeout_s: float
    states: tuple[RankState, ...] = ()
    late: tuple[int, ...] = ()
    signal: str | None = None  # kind "terminated": "by SIGTERM"
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Verdict | None:
        if not d:
            return None
        return cls(d.get("kind") or "", d.get("after_s", 0.0), d.get("detected_by") or "?", d.get("timeout_s", 0.0),
                   tuple(RankState.from_dict(s) for s in d.get("states") or ()), tuple(d.get("late") or ()),
                   d.get("signal"), d)


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
    correctness: tuple[CollectiveResult, ...] = ()
    bandwidth: tuple[Mapping[str, Any], ...] = ()  # {"size", "warmup", "iters", "times"}
    gloo_cpu: GlooCheck | None = None  # Gloo next to NCCL
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
            correctness=tuple(CollectiveResult.from_dict(e) for e in d.get("correctness") or ()),
            bandwidth=tuple(d.get("bandwidth") or ()), gloo_cpu=GlooCheck.from_dict(d.get("gloo_cpu")), gpu=GpuView.from_dict(d.get("gpu")),
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
    verdict: Verdict | None = None  # when the watchdog stopped the run
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
        return cls(cfg, int(world.get("world_size") or len(records)), backend, records,
                   Verdict.from_dict(world.get("verdict")),
                   records_of(fix_world), bool(fix_world), dict(env or {}), master, port)
