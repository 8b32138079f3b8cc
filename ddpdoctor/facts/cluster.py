"""The cluster view: every node's record as the first node gathered it (ddpdoctor/cluster/node.py),
the typed context the DD71x checks judge (ddpdoctor/checks/cluster.py). Records are NodeRecords
(facts/noderecord.py); JSON records (from the store, or in tests) are parsed into them on the way in.
render/cluster.py and render/heatmap.py draw it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ddpdoctor.facts.noderecord import LocalResult, NodeRecord, PairingRounds, PeerProbe
from ddpdoctor.probes import sockets


OK, NOT_PROBED, NO_NAME, WRONG_HOST, RDZV_FAIL, EPH_FAIL, BOTH_FAIL, UNKNOWN = "ok", "·", "N", "W", "R", "E", "X", "?"
MATRIX_MAX = 64  # up to this many nodes the report carries (and shows) the full matrix


def cell(probe: PeerProbe | None) -> str:
    if probe is None:
        return NOT_PROBED
    if not probe.addr:
        return NO_NAME
    rd = probe.rdzv.state if probe.rdzv else None
    if rd == "wrong-host":
        return WRONG_HOST
    eph = probe.eph
    rd_ok = rd == sockets.OPEN
    eph_ok = eph is None or eph.state == sockets.OPEN
    if rd_ok and eph_ok:
        return OK
    if not rd_ok and (eph is None or not eph_ok):
        return BOTH_FAIL
    return RDZV_FAIL if not rd_ok else EPH_FAIL


@dataclass
class Pair:
    src: int
    dst: int
    kind: str            # NO_NAME, WRONG_HOST, RDZV_FAIL, EPH_FAIL, BOTH_FAIL
    probe: PeerProbe


class ClusterView:
    """Every node's record, judged by the DD71x checks; built on the first node (or from JSON in tests)."""

    def __init__(self, records: Mapping[Any, NodeRecord | Mapping], world: int, *, names: Sequence[str] = (),
                 port: int = 29400, store: str = "", elapsed_s: float = 0.0, reference: Mapping[str, str] | None = None):
        self.reference = dict(reference) if reference else None  # DD720: a fingerprint file, else the majority
        # JSON records (the store's, a test's) are typed here, once; one that cannot be read says why
        self.records: dict[int, NodeRecord] = {
            int(k): v if isinstance(v, NodeRecord) else NodeRecord.from_wire(v, int(k)) for k, v in records.items()}
        self.world = world
        self.port = port
        self.store = store
        self.elapsed_s = elapsed_s
        probed = {j: p.name for r in self.records.values() for j, p in r.probes.items()}
        self.names = [self._own_name(i) or (names[i] if i < len(names) else None) or probed.get(i) or f"rank{i}"
                      for i in range(world)]
        first = self.records.get(0)
        self.hostname = first.hostname if first is not None and not first.malformed else (self.names[0] if self.names else "?")

    def _own_name(self, i: int) -> str:
        r = self.records.get(i)
        return r.node if r is not None else ""

    def record(self, i: int) -> NodeRecord | None:
        """What node i published (None: nothing), whether or not it finished."""
        return self.records.get(i)

    # -- who took part
    @property
    def missing(self) -> list[int]:
        return [i for i in range(self.world) if i not in self.records or self.records[i].missing]

    @property
    def malformed(self) -> dict[int, str]:
        """node -> why the record it published could not be read."""
        return {i: r.malformed for i, r in sorted(self.records.items()) if r.malformed}

    def finished(self, i: int) -> bool:
        return i in self.records and not self.records[i].missing

    def probe(self, src: int, dst: int) -> PeerProbe | None:
        if not self.finished(src):
            return None
        return self.records[src].probes.get(dst)

    def cell(self, src: int, dst: int) -> str:
        if src == dst:
            return "-"
        if not self.finished(src):
            return UNKNOWN
        return cell(self.probe(src, dst))

    def pairs(self) -> list[Pair]:
        out = []
        for i in range(self.world):
            for j in range(self.world):
                if i != j:
                    c = self.cell(i, j)
                    if c not in (OK, NOT_PROBED, UNKNOWN, "-"):
                        out.append(Pair(i, j, c, self.probe(i, j) or PeerProbe("")))
        return out

    def seen_by(self, j: int) -> list[int]:
        """Reporting nodes whose probe reached node j's rendezvous port (ddpdoctor answered)."""
        return [i for i in range(self.world) if i != j and _answered(self.probe(i, j))]

    # -- names
    def resolutions(self) -> dict[int, dict[str, list[int]]]:
        """For each target node: first address -> the nodes that resolved its name to it."""
        out: dict[int, dict[str, list[int]]] = {}
        for i in range(self.world):
            if not self.finished(i):
                continue
            for j, p in self.records[i].probes.items():
                if p.addr:
                    out.setdefault(j, {}).setdefault(p.addr, []).append(i)
        return out

    def own_addrs(self, j: int) -> list[str]:
        r = self.records.get(j)
        return list(r.addrs) if r is not None else []

    # -- drift
    def drift(self, section: str) -> dict[str, dict[str, list[int]]]:
        """key -> {value: [nodes]} for every key whose value differs between reporting nodes
        (`section`: "versions" or "settings")."""
        values: dict[str, dict[int, str]] = {}
        done = [i for i in range(self.world) if self.finished(i)]
        for i in done:
            section_of = self.records[i].versions if section == "versions" else self.records[i].settings
            for k, v in section_of.items():
                values.setdefault(k, {})[i] = v
        out = {}
        for k, per in values.items():
            groups: dict[str, list[int]] = {}
            for i in done:
                groups.setdefault(per.get(i, "(unset)"), []).append(i)
            if len(groups) > 1:
                out[k] = groups
        return out

    # -- fingerprint (DD720)
    def fingerprint(self, i: int) -> dict[str, str]:
        """Versions, NCCL_/GLOO_ settings and key variables of node i, flattened."""
        r = self.records.get(i)
        return {**r.versions, **r.settings, **r.env} if r is not None else {}

    def majority_fingerprint(self) -> dict[str, str]:
        """Per key, the value most reporting nodes have (unset counts as a value)."""
        done = [i for i in range(self.world) if self.finished(i)]
        fps = [self.fingerprint(i) for i in done]
        keys = sorted({k for fp in fps for k in fp})
        out = {}
        for k in keys:
            (v, _), = Counter(fp.get(k, "(unset)") for fp in fps).most_common(1)
            if v != "(unset)":
                out[k] = v
        return out

    def fingerprint_diffs(self) -> dict[int, dict[str, tuple[str, str]]]:
        """node -> {key: (its value, the reference's)} for keys that differ from the reference
        (the file given, else the majority). A reference compares only the keys it names."""
        ref = self.reference if self.reference is not None else self.majority_fingerprint()
        out: dict[int, dict[str, tuple[str, str]]] = {}
        for i in range(self.world):
            if not self.finished(i):
                continue
            fp = self.fingerprint(i)
            keys = ref.keys() if self.reference is not None else set(ref) | set(fp)
            d = {k: (fp.get(k, "(unset)"), ref.get(k, "(unset)")) for k in sorted(keys)
                 if fp.get(k, "(unset)") != ref.get(k, "(unset)")}
            if d:
                out[i] = d
        return out

    # -- verdict per node
    def local_failures(self) -> dict[int, list[LocalResult]]:
        out = {}
        for i in range(self.world):
            if self.finished(i):
                bad = [r for r in self.records[i].local if r.status == "fail"]
                if bad:
                    out[i] = bad
        return out

    @property
    def pairing(self) -> PairingRounds | None:
        """The two pairing rounds' verdict (large clusters, cluster/pairing.py), else None."""
        first = self.records.get(0)
        return first.pairing if first is not None else None

    def timing(self, i: int) -> dict[str, float]:
        """How long node i took to listen, reach the store, probe, in all (the report's per-node timing)."""
        r = self.records.get(i)
        return dict(r.timing) if r is not None else {}

    @property
    def incoming(self) -> list:
        """Who connected to the first node's listener during the run."""
        first = self.records.get(0)
        return list(first.incoming or ()) if first is not None else []

    def mtu_of(self, j: int) -> dict[str, int]:
        """address -> MTU of the interface carrying it, on node j."""
        r = self.records.get(j)
        return dict(r.addr_mtu) if r is not None else {}

    def failing(self) -> list[int]:
        """Nodes to exclude so that every remaining pair connects: missing nodes, nodes whose own
        checks fail, the pairing rounds' bad nodes, then a greedy cover of the broken pairs (a pair
        blames the node both ends share most, the receiving end on a tie: a firewall usually drops
        what comes in)."""
        bad = set(self.missing) | set(self.local_failures())
        if self.pairing:
            bad |= set(self.pairing.bad)
        pairs = [(p.src, p.dst) for p in self.pairs() if p.src not in bad and p.dst not in bad]
        while pairs:
            score: Counter = Counter()
            for s, d in pairs:
                score[s] += 2
                score[d] += 3  # the receiver's side wins ties
            worst = max(score, key=lambda n: (score[n], n))
            bad.add(worst)
            pairs = [(s, d) for s, d in pairs if worst not in (s, d)]
        return sorted(bad)

    def passing(self) -> list[int]:
        bad = set(self.failing())
        return [i for i in range(self.world) if i not in bad]

    def label(self, idxs: Sequence[int]) -> str:
        from ddpdoctor import hostlist
        try:
            return hostlist.collect([self.names[i] for i in idxs])
        except Exception:  # noqa: BLE001 - names python-hostlist cannot fold: list them
            return ",".join(self.names[i] for i in idxs)

    # -- what the report carries
    def matrix(self) -> list[list[str]] | None:
        """Every cell, row probes column (None past MATRIX_MAX nodes: the summary stands for it)."""
        if self.world > MATRIX_MAX:
            return None
        return [[self.cell(i, j) for j in range(self.world)] for i in range(self.world)]

    def summary(self) -> dict[str, Any]:
        """Probe and failure counts, and the nodes most often unreachable (for clusters past MATRIX_MAX)."""
        probed = sum(1 for i in range(self.world) for j in range(self.world) if i != j and self.probe(i, j) is not None)
        pairs = self.pairs()
        by_dst = Counter(p.dst for p in pairs)
        return {"probes": probed, "pairs": self.world * (self.world - 1), "failed": len(pairs),
                "unreachable_from": [[self.names[j], c] for j, c in by_dst.most_common(10)]}


def _answered(p: PeerProbe | None) -> bool:
    """A probe reached the peer's rendezvous port and ddpdoctor answered the handshake there."""
    return bool(p is not None and p.rdzv is not None and p.rdzv.ddpdoctor)
