"""The cluster view: every node's record as the first node gathered it (ddpdoctor/cluster/node.py),
the typed context the DD71x checks judge (ddpdoctor/checks/cluster.py). Plain data in, so it is
built from JSON in tests; render/cluster.py and render/heatmap.py draw it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ddpdoctor.probes import sockets


OK, NOT_PROBED, NO_NAME, WRONG_HOST, RDZV_FAIL, EPH_FAIL, BOTH_FAIL, UNKNOWN = "ok", "·", "N", "W", "R", "E", "X", "?"
MATRIX_MAX = 64  # up to this many nodes the report carries (and shows) the full matrix


def cell(probe: Mapping[str, Any] | None) -> str:
    if probe is None:
        return NOT_PROBED
    if not probe.get("addr"):
        return NO_NAME
    rd = (probe.get("rdzv") or {}).get("state")
    if rd == "wrong-host":
        return WRONG_HOST
    eph = probe.get("eph")
    rd_ok = rd == sockets.OPEN
    eph_ok = eph is None or eph.get("state") == sockets.OPEN
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
    probe: dict[str, Any]


class ClusterView:
    """Every node's record, judged by the DD71x checks; built on the first node (or from JSON in tests)."""

    def __init__(self, records: Mapping[int, dict], world: int, *, names: Sequence[str] = (), port: int = 29400,
                 store: str = "", elapsed_s: float = 0.0, reference: Mapping[str, str] | None = None):
        self.reference = dict(reference) if reference else None  # DD720: a fingerprint file, else the majority
        self.records = {int(k): v for k, v in records.items()}
        self.world = world
        self.port = port
        self.store = store
        self.elapsed_s = elapsed_s
        probed = {int(j): p.get("name") for r in self.records.values() for j, p in (r.get("probes") or {}).items()}
        self.names = [(self.records.get(i) or {}).get("node") or (names[i] if i < len(names) else None)
                      or probed.get(i) or f"rank{i}" for i in range(world)]
        self.hostname = (self.records.get(0) or {}).get("hostname", self.names[0] if self.names else "?")

    # -- who took part
    @property
    def missing(self) -> list[int]:
        return [i for i in range(self.world) if i not in self.records or self.records[i].get("unfinished")]

    def finished(self, i: int) -> bool:
        return i in self.records and not self.records[i].get("unfinished")

    def probe(self, src: int, dst: int) -> dict[str, Any] | None:
        if not self.finished(src):
            return None
        return (self.records[src].get("probes") or {}).get(str(dst))

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
                        out.append(Pair(i, j, c, self.probe(i, j) or {}))
        return out

    def seen_by(self, j: int) -> list[int]:
        """Reporting nodes whose probe reached node j's rendezvous port (ddpdoctor answered)."""
        return [i for i in range(self.world) if i != j and (self.probe(i, j) or {}).get("rdzv", {}).get("ddpdoctor")]

    # -- names
    def resolutions(self) -> dict[int, dict[str, list[int]]]:
        """For each target node: first address -> the nodes that resolved its name to it."""
        out: dict[int, dict[str, list[int]]] = {}
        for i in range(self.world):
            if not self.finished(i):
                continue
            for j_s, p in (self.records[i].get("probes") or {}).items():
                if p.get("addr"):
                    out.setdefault(int(j_s), {}).setdefault(p["addr"], []).append(i)
        return out

    def own_addrs(self, j: int) -> list[str]:
        return list((self.records.get(j) or {}).get("addrs") or [])

    # -- drift
    def drift(self, section: str) -> dict[str, dict[str, list[int]]]:
        """key -> {value: [nodes]} for every key whose value differs between reporting nodes."""
        values: dict[str, dict[int, str]] = {}
        done = [i for i in range(self.world) if self.finished(i)]
        for i in done:
            for k, v in (self.records[i].get(section) or {}).items():
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
        r = self.records.get(i) or {}
        return {**(r.get("versions") or {}), **(r.get("settings") or {}), **(r.get("env") or {})}

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
    def local_failures(self) -> dict[int, list[dict]]:
        out = {}
        for i in range(self.world):
            if self.finished(i):
                bad = [r for r in self.records[i].get("local") or [] if r.get("status") == "fail"]
                if bad:
                    out[i] = bad
        return out

    @property
    def pairing(self) -> dict | None:
        """The two pairing rounds' verdict (large clusters, cluster/pairing.py), else None."""
        return (self.records.get(0) or {}).get("pairing")

    def failing(self) -> list[int]:
        """Nodes to exclude so that every remaining pair connects: missing nodes, nodes whose own
        checks fail, the pairing rounds' bad nodes, then a greedy cover of the broken pairs (a pair
        blames the node both ends share most, the receiving end on a tie: a firewall usually drops
        what comes in)."""
        bad = set(self.missing) | set(self.local_failures())
        if self.pairing:
            bad |= set(self.pairing.get("bad") or [])
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
