"""The records the nodes of a `cluster` run exchange through the store, typed.

Each node builds its record from these classes (ddpdoctor/cluster/node.py) and publishes
`to_wire()`; the first node turns every record it gathers back into them with `from_wire()`, once,
before anything judges them (facts/cluster.py ClusterView, the DD71x checks in checks/cluster.py).
A record comes from another machine, possibly another ddpdoctor version or a corrupted store value:
`from_wire` checks every field it reads and raises MalformedRecord naming the field, and the first
node then counts that node as one whose record could not be read (DD711 names it) instead of
crashing on it.

    Hello        what a node says first (hello/<index>): names, addresses, its ports
    PeerProbe    one node's probe of one peer (cluster/peers.py probe_peer): lookup, both ports
    PairSide     one node's side of a pairing-round test (cluster/peers.py pair_tests)
    LocalResult  one of the node's own prolog checks (a CheckResult's JSON)
    PairingRounds the first node's verdict of the two pairing rounds (cluster/pairing.py)
    NodeRecord   everything one node published (result/<index>, result2/<index>)
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ddpdoctor.model import Fix


class MalformedRecord(ValueError):
    """A record from the store that cannot be read; the message names the field and the value."""


# ----------------------------------------------------------------------------- field readers

def _show(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _str(d: Mapping, key: str, default: str | None = "") -> str | None:
    v = d.get(key, default)
    if v is None and default is None:
        return None
    if not isinstance(v, str):
        raise MalformedRecord(f"{key}: want a string, got {_show(v)}")
    return v


def _int(d: Mapping, key: str, default: int | None = 0) -> int | None:
    v = d.get(key, default)
    if v is None and default is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise MalformedRecord(f"{key}: want an integer, got {_show(v)}")
    return v


def _num(d: Mapping, key: str, default: float = 0.0) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise MalformedRecord(f"{key}: want a number, got {_show(v)}")
    return v


def _bool(d: Mapping, key: str, default: bool = False) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise MalformedRecord(f"{key}: want true or false, got {_show(v)}")
    return v


def _obj(d: Mapping, key: str) -> Mapping:
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise MalformedRecord(f"{key}: want an object, got {_show(v)}")
    return v


def _list(d: Mapping, key: str) -> list:
    v = d.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise MalformedRecord(f"{key}: want a list, got {_show(v)}")
    return v


def _strs(d: Mapping, key: str) -> tuple[str, ...]:
    v = _list(d, key)
    if not all(isinstance(x, str) for x in v):
        raise MalformedRecord(f"{key}: want a list of strings, got {_show(v)}")
    return tuple(v)


def _str_map(d: Mapping, key: str) -> dict[str, str]:
    v = _obj(d, key)
    if not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise MalformedRecord(f"{key}: want an object of strings, got {_show(v)}")
    return dict(v)


def _by_node(d: Mapping, key: str, parse: Callable[[Mapping], Any]) -> dict[int, Any]:
    """{"3": {...}} -> {3: parse({...})}: JSON keys are strings; a peer's index is a number."""
    out = {}
    for k, v in _obj(d, key).items():
        if not (isinstance(k, str) and k.isascii() and k.isdigit()):
            raise MalformedRecord(f"{key}: {_show(k)} is not a node index")
        if not isinstance(v, Mapping):
            raise MalformedRecord(f"{key}.{k}: want an object, got {_show(v)}")
        try:
            out[int(k)] = parse(v)
        except MalformedRecord as e:
            raise MalformedRecord(f"{key}.{k}.{e}") from None
    return out


def _wire_map(m: Mapping[int, Any]) -> dict[str, Any]:
    return {str(j): v.to_wire() for j, v in m.items()}


# ----------------------------------------------------------------------------- records

@dataclass(frozen=True)
class PortProbe:
    """A connect to one port of a peer: the rendezvous port (with the ddpdoctor handshake) or the
    ephemeral port the peer's listener holds open."""
    state: str                  # probes/sockets.py OPEN, REFUSED, ...; "wrong-host" when another host answers
    ms: float = 0.0
    error: str = ""
    ddpdoctor: bool | None = None  # rendezvous port, connected: whether ddpdoctor answered the handshake
    answered_by: str = ""
    port: int | None = None        # ephemeral port: which one

    @classmethod
    def from_wire(cls, d: Mapping) -> PortProbe:
        return cls(_str(d, "state"), _num(d, "ms"), _str(d, "error"),
                   _bool(d, "ddpdoctor") if d.get("ddpdoctor") is not None else None, _str(d, "answered_by"),
                   _int(d, "port", None))

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "ms": self.ms, "error": self.error}
        if self.ddpdoctor is not None:
            out.update(ddpdoctor=self.ddpdoctor, answered_by=self.answered_by)
        if self.port is not None:
            out["port"] = self.port
        return out


@dataclass(frozen=True)
class PeerProbe:
    """One node's probe of one peer: the name looked up as a job would, then both ports."""
    name: str
    addrs: tuple[str, ...] = ()
    resolve_error: str = ""
    resolve_ms: float = 0.0
    resolve_timed_out: bool = False
    addr: str | None = None     # the address probed (None: the name did not resolve)
    rdzv: PortProbe | None = None
    eph: PortProbe | None = None
    error: str = ""             # the probe itself failed (a bug): nothing else is known
    no_hello: bool = False      # the peer never said hello: probed by the launcher's name for it

    @classmethod
    def from_wire(cls, d: Mapping) -> PeerProbe:
        rdzv, eph = _obj(d, "rdzv"), _obj(d, "eph")
        return cls(_str(d, "name"), _strs(d, "addrs"), _str(d, "resolve_error"), _num(d, "resolve_ms"),
                   _bool(d, "resolve_timed_out"), _str(d, "addr", None),
                   PortProbe.from_wire(rdzv) if rdzv else None, PortProbe.from_wire(eph) if eph else None,
                   _str(d, "error"), _bool(d, "no_hello"))

    def to_wire(self) -> dict[str, Any]:
        if self.error:
            out: dict[str, Any] = {"name": self.name, "error": self.error}
        else:
            out = {"name": self.name, "addrs": list(self.addrs), "resolve_error": self.resolve_error,
                   "resolve_ms": self.resolve_ms, "resolve_timed_out": self.resolve_timed_out, "addr": self.addr}
            if self.rdzv is not None:
                out["rdzv"] = self.rdzv.to_wire()
            if self.eph is not None:
                out["eph"] = self.eph.to_wire()
        if self.no_hello:
            out["no_hello"] = True
        return out


@dataclass(frozen=True)
class PairSide:
    """One node's side of a pair test: the cell its probe found, the 1 MiB transfer, the all-reduce."""
    ok: bool
    seconds: float = 0.0
    cell: str = "?"
    bulk: Mapping[str, Any] | None = None       # {"sent_ok", "back_ok", "error", "complete"} (probes/pathmtu.bulk)
    allreduce: Mapping[str, Any] | None = None  # {"ok", "seconds", "error"} (cluster/allreduce.py)

    @classmethod
    def from_wire(cls, d: Mapping) -> PairSide:
        bulk, ar = _obj(d, "bulk"), _obj(d, "allreduce")
        return cls(_bool(d, "ok"), _num(d, "seconds"), _str(d, "cell", "?"), dict(bulk) if bulk else None,
                   dict(ar) if ar else None)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "seconds": self.seconds, "cell": self.cell}
        if self.bulk is not None:
            out["bulk"] = dict(self.bulk)
        if self.allreduce is not None:
            out["allreduce"] = dict(self.allreduce)
        return out

    @property
    def transfer_error(self) -> str | None:
        """Why the 1 MiB transfer did not complete (None: it completed, or did not run)."""
        if self.bulk and not self.bulk.get("complete"):
            return self.bulk.get("error") or "incomplete"
        return None

    @property
    def allreduce_error(self) -> str | None:
        if self.allreduce and not self.allreduce.get("ok"):
            return self.allreduce.get("error") or "failed"
        return None


@dataclass(frozen=True)
class LocalFinding:
    severity: str   # "error" | "warning" | "info"
    message: str
    hint: str = ""
    fix: Fix | None = None

    @classmethod
    def from_wire(cls, d: Mapping) -> LocalFinding:
        fx = _obj(d, "fix")
        fix = Fix(_str(fx, "summary"), _strs(fx, "commands"), _str_map(fx, "env")) if fx else None
        return cls(_str(d, "severity"), _str(d, "message"), _str(d, "hint") or "", fix)


@dataclass(frozen=True)
class LocalResult:
    """One of a node's own prolog checks, as its CheckResult.to_dict() said."""
    id: str
    status: str
    findings: tuple[LocalFinding, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, d: Mapping) -> LocalResult:
        return cls(_str(d, "id"), _str(d, "status"), tuple(LocalFinding.from_wire(f) for f in _objs(d, "findings")), d)


def _objs(d: Mapping, key: str) -> list[Mapping]:
    v = _list(d, key)
    if not all(isinstance(x, Mapping) for x in v):
        raise MalformedRecord(f"{key}: want a list of objects, got {_show(v)}")
    return v


@dataclass(frozen=True)
class PairingRounds:
    """The first node's verdict of the pairing rounds; `to_wire` is the report's `cluster.pairing`."""
    round1: tuple[tuple, ...] = ()   # [a, b, ok, seconds, detail] per pair test
    round2: tuple[tuple, ...] = ()
    bad: tuple[int, ...] = ()
    slow: tuple[int, ...] = ()
    cleared: tuple[int, ...] = ()
    inconclusive: tuple[int, ...] = ()
    rounds: int = 1
    tests: int = 0

    @classmethod
    def from_wire(cls, d: Mapping) -> PairingRounds:
        def nodes(key):
            v = _list(d, key)
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise MalformedRecord(f"pairing.{key}: want a list of node indexes, got {_show(v)}")
            return tuple(v)
        return cls(tuple(tuple(t) for t in _list(d, "round1")), tuple(tuple(t) for t in _list(d, "round2")),
                   nodes("bad"), nodes("slow"), nodes("cleared"), nodes("inconclusive"), _int(d, "rounds", 1),
                   _int(d, "tests", 0))

    def to_wire(self) -> dict[str, Any]:
        return {"round1": [list(t) for t in self.round1], "round2": [list(t) for t in self.round2],
                "bad": list(self.bad), "slow": list(self.slow), "cleared": list(self.cleared),
                "inconclusive": list(self.inconclusive), "rounds": self.rounds, "tests": self.tests}


@dataclass(frozen=True)
class Hello:
    """What a node publishes first (hello/<index>), before it probes: enough for its peers to probe it."""
    index: int
    node: str
    hostname: str = ""
    addrs: tuple[str, ...] = ()
    addr_mtu: Mapping[str, int] = field(default_factory=dict)  # address -> MTU of its interface (DD719)
    port: int = 0
    port_error: str = ""        # the rendezvous port could not be held here
    eport: int | None = None    # the ephemeral port its listener holds open
    eport_range: tuple[int, int] | None = None

    @classmethod
    def from_wire(cls, d: Mapping) -> Hello:
        return cls(**_hello_fields(d))

    def to_wire(self) -> dict[str, Any]:
        return {"index": self.index, "node": self.node, "hostname": self.hostname, "addrs": list(self.addrs),
                "addr_mtu": dict(self.addr_mtu), "port": self.port, "port_error": self.port_error,
                "eport": self.eport, "eport_range": list(self.eport_range) if self.eport_range else None}


def _hello_fields(d: Mapping) -> dict[str, Any]:
    mtu = _obj(d, "addr_mtu")
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in mtu.items()):
        raise MalformedRecord(f"addr_mtu: want an object of address -> MTU, got {_show(mtu)}")
    rng = d.get("eport_range")
    if rng is not None and not (isinstance(rng, list) and len(rng) == 2
                                and all(isinstance(x, int) and not isinstance(x, bool) for x in rng)):
        raise MalformedRecord(f"eport_range: want [lo, hi], got {_show(rng)}")
    return {"index": _int(d, "index"), "node": _str(d, "node"), "hostname": _str(d, "hostname"),
            "addrs": _strs(d, "addrs"), "addr_mtu": dict(mtu), "port": _int(d, "port"),
            "port_error": _str(d, "port_error"), "eport": _int(d, "eport", None),
            "eport_range": tuple(rng) if rng else None}


@dataclass(frozen=True)
class NodeRecord(Hello):
    """Everything one node published; on the first node also what only it knows (`incoming`, `pairing`).
    `unfinished`: the node said hello but published no result before the deadline. `malformed`: what it
    published could not be read (the reason); either way the node counts as missing."""
    versions: Mapping[str, str] = field(default_factory=dict)  # torch, NCCL, CUDA, driver, Python, ddpdoctor
    settings: Mapping[str, str] = field(default_factory=dict)  # NCCL_*/GLOO_* (and /etc/nccl.conf)
    env: Mapping[str, str] = field(default_factory=dict)       # key variables (the fingerprint, DD720)
    peers: tuple[int, ...] = ()
    probes: Mapping[int, PeerProbe] = field(default_factory=dict)
    local: tuple[LocalResult, ...] = ()
    timing: Mapping[str, float] = field(default_factory=dict)
    pairs1: Mapping[int, PairSide] | None = None
    probes2: Mapping[int, PeerProbe] | None = None
    pairs2: Mapping[int, PairSide] | None = None
    incoming: tuple[Mapping[str, Any], ...] | None = None   # the first node's listener: who connected
    pairing: PairingRounds | None = None
    unfinished: bool = False
    malformed: str = ""

    @classmethod
    def from_wire(cls, d: Any, index: int | None = None) -> NodeRecord:
        """The record `d` as read from the store; a malformed one becomes a record that says why."""
        try:
            if not isinstance(d, Mapping):
                raise MalformedRecord(f"want a JSON object, got {_show(d)}")
            rec = cls._parse(d)
            if index is not None and rec.index != index:
                raise MalformedRecord(f"index: {rec.index} published under node {index}'s key")
            return rec
        except MalformedRecord as e:
            return cls(index if index is not None else -1, "", malformed=str(e))

    @classmethod
    def _parse(cls, d: Mapping) -> NodeRecord:
        timing = _obj(d, "timing")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in timing.values()):
            raise MalformedRecord(f"timing: want an object of seconds, got {_show(timing)}")
        peers = _list(d, "peers")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in peers):
            raise MalformedRecord(f"peers: want a list of node indexes, got {_show(peers)}")
        incoming = d.get("incoming")
        if incoming is not None and not (isinstance(incoming, list) and all(isinstance(x, (Mapping, list)) for x in incoming)):
            raise MalformedRecord(f"incoming: want a list, got {_show(incoming)}")
        pairing = _obj(d, "pairing")
        return cls(**_hello_fields(d), versions=_str_map(d, "versions"), settings=_str_map(d, "settings"),
                   env=_str_map(d, "env"), peers=tuple(peers), probes=_by_node(d, "probes", PeerProbe.from_wire),
                   local=tuple(LocalResult.from_wire(r) for r in _objs(d, "local")), timing=dict(timing),
                   pairs1=_by_node(d, "pairs1", PairSide.from_wire) if "pairs1" in d else None,
                   probes2=_by_node(d, "probes2", PeerProbe.from_wire) if "probes2" in d else None,
                   pairs2=_by_node(d, "pairs2", PairSide.from_wire) if "pairs2" in d else None,
                   incoming=tuple(incoming) if incoming is not None else None,
                   pairing=PairingRounds.from_wire(pairing) if pairing else None,
                   unfinished=_bool(d, "unfinished"))

    def to_wire(self) -> dict[str, Any]:
        """The JSON a node publishes (result/<index>)."""
        out = {**Hello.to_wire(self), "versions": dict(self.versions), "settings": dict(self.settings),
               "env": dict(self.env), "peers": list(self.peers), "probes": _wire_map(self.probes),
               "local": [dict(r.raw) for r in self.local], "timing": dict(self.timing)}
        for key in ("pairs1", "probes2", "pairs2"):
            if getattr(self, key) is not None:
                out[key] = _wire_map(getattr(self, key))
        if self.incoming is not None:
            out["incoming"] = list(self.incoming)
        if self.pairing is not None:
            out["pairing"] = self.pairing.to_wire()
        if self.unfinished:
            out["unfinished"] = True
        return out

    @property
    def missing(self) -> bool:
        """It published no readable result."""
        return self.unfinished or bool(self.malformed)

    def replace(self, **kw) -> NodeRecord:
        return dataclasses.replace(self, **kw)


def round2_from_wire(d: Any) -> tuple[dict[int, PeerProbe], dict[int, PairSide]]:
    """A node's round-2 result (result2/<index>: its probes and pair tests); MalformedRecord if unreadable."""
    if not isinstance(d, Mapping):
        raise MalformedRecord(f"want a JSON object, got {_show(d)}")
    return _by_node(d, "probes2", PeerProbe.from_wire), _by_node(d, "pairs2", PairSide.from_wire)
