"""The typed context `inspect`'s checks read: one view per rank, per node, the flight recorder and watchdog verdicts.

Built once from the gathered facts (ddpdoctor/inspect/sample.py, gather.py: plain JSON-able records, the
wire format of --gather) at the boundary, so the checks read fields, never guess at keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

WAITING = ("collective", "init", "distributed")  # where.py kinds: inside a torch.distributed call


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, str)) and str(v).isdigit() else None


@dataclass(frozen=True)
class Where:
    kind: str   # collective | init | distributed | ddp | backward | dataloader | python | unknown
    call: str
    file: str
    line: int
    func: str
    active: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Where | None:
        if not d:
            return None
        return cls(d["kind"], d["call"], d["file"], d["line"], d["func"], bool(d.get("active", False)))

    @property
    def at(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def waiting(self) -> bool:
        return self.kind in WAITING

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "call": self.call, "file": self.file, "line": self.line, "func": self.func,
                "active": self.active}


@dataclass(frozen=True)
class StackSample:
    ok: bool
    kind: str = ""      # "", permission, gone, timeout, missing, other
    error: str = ""
    where: Where | None = None
    signature: tuple | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StackSample:
        sig = d.get("signature")
        return cls(bool(d.get("ok")), d.get("kind") or "", d.get("error") or "", Where.from_dict(d.get("where")),
                   None if sig is None else tuple(tuple(x) for x in sig))


@dataclass(frozen=True)
class RankView:
    rank: int
    pid: int
    node: str                  # the node it runs on (--gather), else the host
    state: str                 # /proc state letter, or "gone"
    samples: tuple[StackSample, ...]
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    cuda_visible_devices: str | None = None
    main_thread_cpu: float | None = None
    main_wakeups: int | None = None
    syscalls_per_s: float | None = None
    seconds: float | None = None
    members: tuple[int, ...] = ()
    collectives: int | None = None      # collectives entered between the samples (--debug-server), None unknown
    driver: tuple[int, int] | None = None   # main thread's perf samples (in libcuda.so, elsewhere): CUDA ranks

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RankView:
        env = d.get("env") or {}
        return cls(d["rank"], d["pid"], d.get("node") or d.get("host") or "?", d.get("state") or "",
                   tuple(StackSample.from_dict(s) for s in d["samples"]), d.get("local_rank"), d.get("world_size"),
                   _int(env.get("LOCAL_WORLD_SIZE")), env.get("CUDA_VISIBLE_DEVICES"), d.get("main_thread_cpu"),
                   d.get("main_wakeups"), d.get("syscalls_per_s"), d.get("seconds"), tuple(d.get("members") or ()),
                   d.get("collectives"), _driver(d.get("gpu_driver")))


@dataclass(frozen=True)
class NodeView:
    node: str
    reported: bool
    error: str = ""
    nvml: Mapping[str, Any] = field(default_factory=dict)
    pid_namespace_differs: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeView:
        return cls(d["node"], bool(d.get("reported")), d.get("error") or "", d.get("nvml") or {},
                   bool(d.get("pid_namespace_differs")))


@dataclass(frozen=True)
class FrGroup:
    """One process group's verdict from the flight recorder (flightrec/render.py to_dict)."""
    status: str
    pg: Any = None
    pg_desc: str = ""
    seq: Any = None
    op: str = ""
    not_entered: tuple[int, ...] = ()
    waiting: tuple[int, ...] = ()
    variants: tuple[Mapping[str, Any], ...] = ()
    note: str = ""
    last_seq: Mapping[Any, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FrGroup:
        return cls(d.get("status") or "", d.get("pg"), d.get("pg_desc") or "", d.get("seq"), d.get("op") or "",
                   tuple(d.get("not_entered") or ()), tuple(d.get("waiting") or ()), tuple(d.get("variants") or ()),
                   d.get("note") or "", d.get("last_seq") or {}, d)

    @property
    def label(self) -> str:
        return f"pg {self.pg}" + (f" ({self.pg_desc})" if self.pg_desc else "")


@dataclass(frozen=True)
class FlightRecorderView:
    """The dumps' (or the debug server's live buffers') verdict, or why there is none; `present` False: not armed."""
    present: bool = False
    dir: str = ""
    empty: bool = False
    error: str = ""
    source: str = ""
    groups: tuple[FrGroup, ...] = ()
    missing: tuple[Any, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> FlightRecorderView:
        if not d:
            return cls()
        v = d.get("verdict") or {}
        return cls(True, d.get("dir") or "", bool(d.get("empty")), d.get("error") or "", d.get("source") or "",
                   tuple(FrGroup.from_dict(g) for g in v.get("groups") or ()), tuple(v.get("missing") or ()), d)


@dataclass(frozen=True)
class WatchdogGroup:
    stuck_seq: Any = None
    op: str = ""
    pg: Any = None
    pg_desc: str = ""
    origin: tuple[int, ...] = ()
    victims: tuple[int, ...] = ()
    wavefront: Any = None
    note: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WatchdogGroup:
        return cls(d.get("stuck_seq"), d.get("op") or "", d.get("pg"), d.get("pg_desc") or "",
                   tuple(d.get("origin") or ()), tuple(d.get("victims") or ()), d.get("wavefront"), d.get("note") or "")

    @property
    def label(self) -> str:
        return f"pg {self.pg}" + (f" ({self.pg_desc})" if self.pg_desc else "")


@dataclass(frozen=True)
class WatchdogView:
    present: bool = False
    logs: tuple[str, ...] = ()
    groups: tuple[WatchdogGroup, ...] = ()
    error: str = ""  # the logs could not be read in time (cli/inspect.py _within_deadline)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> WatchdogView:
        if not d:
            return cls()
        return cls(True, tuple(d.get("logs") or ()), tuple(WatchdogGroup.from_dict(g) for g in d.get("groups") or ()),
                   str(d.get("error") or ""))


@dataclass(frozen=True)
class InspectContext:
    host: str
    interval: float
    ranks: tuple[RankView, ...]
    nodes: tuple[NodeView, ...] = ()
    nvml: Mapping[str, Any] = field(default_factory=dict)
    pid_namespace_differs: bool = False
    flightrec: FlightRecorderView = field(default_factory=FlightRecorderView)
    watchdog: WatchdogView = field(default_factory=WatchdogView)

    @classmethod
    def from_facts(cls, facts) -> InspectContext:
        """From sample.InspectFacts (or the merged --gather facts): the one place the records are read."""
        return cls(facts.host, facts.interval, tuple(RankView.from_dict(r) for r in facts.ranks),
                   tuple(NodeView.from_dict(n) for n in facts.nodes), facts.nvml or {}, facts.pid_namespace_differs,
                   FlightRecorderView.from_dict(facts.flightrec), WatchdogView.from_dict(facts.watchdog))

    @classmethod
    def of(cls, ranks: Sequence[Mapping[str, Any]] = (), **kw) -> InspectContext:
        """For tests and tools: a context from plain rank records."""
        return cls(kw.pop("host", "n1"), kw.pop("interval", 1.0), tuple(RankView.from_dict(r) for r in ranks), **kw)


@dataclass(frozen=True)
class NvmlView:
    """probes/nvml.Snapshot as read back from its dict (the --gather wire format)."""
    available: bool = False
    error: str = ""
    gpus: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> NvmlView:
        d = d or {}
        return cls(bool(d.get("available")), d.get("error") or "", tuple(d.get("gpus") or ()))

    def pids(self) -> set[int]:
        return {p["pid"] for g in self.gpus for p in g.get("processes", ())}


def _driver(v) -> tuple[int, int] | None:
    if isinstance(v, Mapping) and isinstance(v.get("driver"), int) and isinstance(v.get("other"), int):
        return (v["driver"], v["other"])
    return None
