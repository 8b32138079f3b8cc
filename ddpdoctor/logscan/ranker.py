"""From matched lines to ranked diagnoses: root causes first, symptoms after, each with evidence.

Confidence of a failure mode: the weights of its distinct matching signatures combined as
independent evidence (1 - prod(1 - w)), plus what the cross-line rules below add. Then:

* consequences (collective timeouts, a dead store host, a generic NCCL system error) are demoted
  when the log also shows a root cause, and say which one;
* failure modes seen only through clues (INFO lines) are dropped when the log shows no failure;
* order: by confidence, except that of two diagnoses within 0.05 of each other the one with the
  earlier evidence goes first — the first specific error is usually the cause and what follows
  its consequence.

Cross-line rules (each cites why):
* different run ids across nodes -> RDZV_ID_MISMATCH (torchrun generates a random run_id when
  --rdzv-id is empty; launcher/api.py);
* a localhost rendezvous endpoint and a rendezvous timeout -> STANDALONE_WITH_MULTINODE
  (run.py: --standalone sets the endpoint to localhost:0; one node alone cannot time out);
* the store connect failing on two or more hosts, or on the endpoint host itself, with nobody
  logging that it hosts the store -> RDZV_HOST_NOT_SELF_RECOGNIZED (c10d_rendezvous_backend.py
  `_matches_machine_hostname`);
* watchdog timeouts at different SeqNum / OpType on different ranks -> UNEVEN_INPUTS_HANG /
  COLLECTIVE_MISMATCH_ACROSS_RANKS (shared/failure-catalog.md §3);
* several NCCL versions in one job -> NCCL_VERSION_MISMATCH_ACROSS_NODES;
* the same group_rank reported by two hosts -> NODE_RANK_DUPLICATED;
* Gloo's connect timing out on every host, with no loopback address involved -> FIREWALL_BLOCKS_PORTS;
* a collective that hung on GeForce GPUs -> CONSUMER_GPU_P2P_BROKEN (then NCCL_P2P_ACS_IOMMU_HANG).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ddpdoctor.catalog.model import CLUE, CONSEQUENCE, FailureMode, Signature
from ddpdoctor.logscan.matcher import LineMatch, Rule

KEEP_EVIDENCE = 3    # first lines kept per signature (plus the last one)
KEEP_VALUES = 64     # distinct captured values kept per signature / fact
MIN_CONFIDENCE = 0.2
MAX_CONFIDENCE = 0.97
CLUE_ONLY_MAX = 0.3
CLOSE = 0.05
LOCALHOST = {"localhost", "127.0.0.1", "::1"}


@dataclass
class Evidence:
    line: int
    text: str
    host: str | None
    rank: int | None
    note: str = ""

    def to_dict(self) -> dict:
        d: dict = {"line": self.line, "text": self.text}
        if self.host:
            d["host"] = self.host
        if self.rank is not None:
            d["rank"] = self.rank
        if self.note:
            d["note"] = self.note
        return d


@dataclass
class SigStats:
    signature: Signature
    count: int = 0
    first: list[Evidence] = field(default_factory=list)
    last: Evidence | None = None
    values: list[tuple[dict, str | None, int | None]] = field(default_factory=list)  # (groups, host, rank)


@dataclass
class FactValue:
    value: dict
    line: int
    text: str
    host: str | None
    rank: int | None


class Collector:
    """Accumulates matches in bounded memory while the log streams by."""

    def __init__(self):
        self.sigs: dict[tuple[str, int], SigStats] = {}   # (failure id, rule index) -> stats
        self.failures: dict[str, FailureMode] = {}
        self.facts: dict[str, list[FactValue]] = {}
        self.fact_counts: dict[str, int] = {}
        self.failed = False   # any cause/symptom line, exception or torchrun failure seen
        self.summary: dict = {}   # torchrun's "Root Cause (first observed failure)" block
        self._in_summary = 0

    def add(self, lm: LineMatch) -> None:
        for rule, groups in lm.matches:
            if rule.fact is not None:
                self._add_fact(rule, groups, lm)
                continue
            fm, sig = rule.failure, rule.signature
            assert fm is not None and sig is not None
            self.failures[fm.id] = fm
            st = self.sigs.get((fm.id, rule.index))
            if st is None:
                st = self.sigs[(fm.id, rule.index)] = SigStats(sig)
            st.count += 1
            ev = Evidence(lm.line, lm.text, lm.host, lm.rank, _note(sig, groups))
            if len(st.first) < KEEP_EVIDENCE:
                st.first.append(ev)
            else:
                st.last = ev
            if groups and len(st.values) < KEEP_VALUES:
                key = (groups, lm.host, lm.rank)
                if key not in st.values:
                    st.values.append(key)
            if sig.role != CLUE:
                self.failed = True

    def _add_fact(self, rule: Rule, groups: dict, lm: LineMatch) -> None:
        name = rule.fact.name  # type: ignore[union-attr]
        if name in ("exception", "torchrun_failed"):
            self.failed = True
        if name == "root_cause":
            self._in_summary = lm.line
            self.summary = {"line": lm.line}
        elif name.startswith("summary_") and self._in_summary and lm.line - self._in_summary <= 8:
            key = name[len("summary_"):]
            self.summary.setdefault(key, groups.get(key) or groups.get("code") or groups.get("rank"))
            if name == "summary_rank":
                self.summary.setdefault("local_rank", groups.get("local_rank"))
        self.fact_counts[name] = self.fact_counts.get(name, 0) + 1
        vals = self.facts.setdefault(name, [])
        if len(vals) < KEEP_VALUES and all(v.value != groups or v.host != lm.host for v in vals):
            vals.append(FactValue(groups, lm.line, lm.text, lm.host, lm.rank))

    # -- helpers for rules
    def fact_values(self, name: str, key: str) -> list[str]:
        out: list[str] = []
        for v in self.facts.get(name, []):
            x = v.value.get(key)
            if x is not None and x not in out:
                out.append(x)
        return out

    def sig_values(self, failure_id: str, pattern_contains: str = "") -> list[tuple[dict, str | None, int | None]]:
        out = []
        for (fid, _), st in self.sigs.items():
            if fid == failure_id and pattern_contains in st.signature.pattern:
                out.extend(st.values)
        return out

    def sig_evidence(self, failure_ids: Iterable[str], pattern_contains: str = "") -> list[Evidence]:
        out = []
        ids = set(failure_ids)
        for (fid, _), st in self.sigs.items():
            if fid in ids and pattern_contains in st.signature.pattern:
                out.extend(st.first)
                if st.last:
                    out.append(st.last)
        return sorted({e.line: e for e in out}.values(), key=lambda e: e.line)


@dataclass
class Diagnosis:
    failure: FailureMode
    confidence: float
    evidence: list[Evidence]
    notes: list[str] = field(default_factory=list)
    consequence_of: str | None = None
    clue_only: bool = False

    @property
    def first_line(self) -> int:
        return min((e.line for e in self.evidence), default=0)

    @property
    def origin(self) -> dict | None:
        for e in sorted(self.evidence, key=lambda e: e.line):
            if e.host or e.rank is not None:
                d: dict = {}
                if e.host:
                    d["host"] = e.host
                if e.rank is not None:
                    d["rank"] = e.rank
                return d
        return None


def _note(sig: Signature, groups: dict) -> str:
    if not sig.note:
        return ""
    try:
        return sig.note.format(**groups)
    except (KeyError, IndexError, ValueError):
        return sig.note if "{" not in sig.note else ""


def _combine(weights: Iterable[float]) -> float:
    p = 1.0
    for w in weights:
        p *= 1.0 - w
    return min(MAX_CONFIDENCE, 1.0 - p)


# Signatures (by a piece of their pattern) of connection failures that a name-resolution failure of the
# same host explains, and of the store-connection error that a store host going away explains.
_CONNECT_SIGS = ("client socket has timed out", "client socket has failed to connect")
_RDZV_CONN_SIG = "RendezvousConnectionError: The connection"
_NAME_SIGS = ("network addresses of", "host not found")


def _unresolved_hosts(col: Collector) -> set[str]:
    out: set[str] = set()
    for (fid, _), st in col.sigs.items():
        if any(k in st.signature.pattern for k in _NAME_SIGS):
            out |= {g.get("host", "").strip() for g, _, _ in st.values if g.get("host")}
    return out


def _explained(col: Collector) -> tuple[set[tuple[str, int]], dict[str, list[str]]]:
    """Signature hits that are consequences of other lines in the same log, and notes for the causes.

    * A connect to host H that timed out, when H itself did not resolve: the lookup failure is the
      cause (c10d retries the lookup until its timeout, then reports the connect timeout).
    * RendezvousConnectionError after `Connection was likely closed`: the store existed and went away.
    * Peers refused at 127.0.0.1 after Gloo warned it could not resolve the hostname: Gloo's fallback
      address, so the hostname not resolving is the cause (ProcessGroupGloo createDefaultDevice).
    """
    unresolved = _unresolved_hosts(col)
    store_gone = any(fid == "RDZV_STORE_HOST_EXITED" for fid, _ in col.sigs)
    gloo_fallback = any(fid == "HOSTNAME_UNRESOLVABLE" and "Unable to resolve hostname" in st.signature.pattern
                        for (fid, _), st in col.sigs.items())
    out: set[tuple[str, int]] = set()
    notes: dict[str, list[str]] = {}
    for key, st in col.sigs.items():
        pat = st.signature.pattern
        if unresolved and any(k in pat for k in _CONNECT_SIGS) and st.values and \
                all(g.get("host", "").strip() in unresolved for g, _, _ in st.values):
            out.add(key)
            host = st.values[0][0].get("host", "")
            notes["HOSTNAME_UNRESOLVABLE"] = [f"the connection to {host} timed out because {host} does not resolve"]
        elif _RDZV_CONN_SIG in pat and (store_gone or unresolved):
            out.add(key)
        elif gloo_fallback and key[0] == "HOSTNAME_RESOLVES_TO_LOOPBACK" and st.values and \
                all(g.get("addr") == "127.0.0.1" for g, _, _ in st.values):
            out.add(key)  # Gloo's own fallback to 127.0.0.1 (the hostname did not resolve), not /etc/hosts
            notes.setdefault("HOSTNAME_UNRESOLVABLE", []).append(
                "peers were refused at 127.0.0.1: Gloo fell back to loopback because the hostname did not resolve")
    return out, notes


def diagnose(col: Collector, catalog: dict[str, FailureMode]) -> list[Diagnosis]:
    weights: dict[str, list[float]] = {}
    evidence: dict[str, list[Evidence]] = {}
    roles: dict[str, set[str]] = {}
    explained, explained_notes = _explained(col)
    covered: dict[str, set[int]] = {}
    # Strongest signatures first: a weaker one only adds confidence when it matched a line of its own
    # (two patterns matching the same line are one piece of evidence, not two).
    for (fid, idx), st in sorted(col.sigs.items(), key=lambda kv: -kv[1].signature.weight):
        if (fid, idx) in explained:
            continue
        lines = {e.line for e in st.first} | ({st.last.line} if st.last else set())
        seen = covered.setdefault(fid, set())
        independent = bool(lines - seen)
        seen |= lines
        if independent:
            weights.setdefault(fid, []).append(st.signature.weight)
        roles.setdefault(fid, set()).add(st.signature.role)
        evs = evidence.setdefault(fid, [])
        evs.extend(st.first)
        if st.last:
            evs.append(st.last)
    notes: dict[str, list[str]] = {}
    for fid, ns in explained_notes.items():
        if fid in weights:
            weights[fid].append(0.3)
            notes.setdefault(fid, []).extend(ns)

    def add(fid: str, weight: float, note: str, evs: Iterable[Evidence] = ()) -> None:
        weights.setdefault(fid, []).append(weight)
        roles.setdefault(fid, set()).add("rule")
        notes.setdefault(fid, []).append(note)
        evidence.setdefault(fid, []).extend(evs)

    _rules(col, add)

    out: list[Diagnosis] = []
    for fid, ws in weights.items():
        fm = catalog[fid]
        evs = sorted({e.line: e for e in evidence.get(fid, [])}.values(), key=lambda e: e.line)
        clue_only = roles.get(fid, set()) <= {CLUE}
        if clue_only and not col.failed:
            continue  # an INFO line in a log that shows no failure is not a diagnosis
        conf = _combine(ws)
        if clue_only:  # INFO lines alone only make a failure possible, never likely
            conf = min(conf, CLUE_ONLY_MAX)
        out.append(Diagnosis(fm, conf, evs, notes.get(fid, []), clue_only=clue_only))
    roots = [d for d in out if d.failure.kind != CONSEQUENCE and d.confidence >= 0.5 and not d.clue_only]
    if roots:
        top = max(roots, key=lambda d: (d.confidence, -d.first_line))
        for d in out:
            if d.failure.kind == CONSEQUENCE:
                d.confidence *= 0.6
                d.consequence_of = top.failure.id
    out = [d for d in out if d.confidence >= MIN_CONFIDENCE]
    out.sort(key=lambda d: (-d.confidence, d.first_line))
    # Among causes within CLOSE of each other, the earlier evidence goes first: the first specific error
    # is usually the cause, and what follows it its fallout.
    for _ in range(len(out)):
        moved = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if (a.failure.kind == b.failure.kind and a.confidence - b.confidence <= CLOSE
                    and b.first_line < a.first_line):
                out[i], out[i + 1] = b, a
                moved = True
        if not moved:
            break
    return out


def _rules(col: Collector, add) -> None:
    # A localhost endpoint and a rendezvous timeout: every node waited in a private rendezvous.
    local_eps = [v for v in col.facts.get("rdzv_endpoint", []) if v.value.get("host") in LOCALHOST]
    timeouts = col.sig_evidence(["RDZV_NODES_MISSING"], "RendezvousTimeoutError")
    standalone = bool(local_eps and timeouts)
    if standalone:
        v = local_eps[0]
        add("STANDALONE_WITH_MULTINODE", 0.8,
            f"the rendezvous endpoint is {v.value.get('host')} (--standalone), and the rendezvous timed out waiting "
            "for other nodes", [Evidence(v.line, v.text, v.host, v.rank)] + timeouts[:1])

    # Different run ids across nodes.
    run_ids = col.fact_values("run_id", "id")
    if len(run_ids) >= 2 and not standalone:  # --standalone invents a run id per node: that explains them
        evs = [Evidence(v.line, v.text, v.host, v.rank) for v in col.facts.get("run_id", [])][:4]
        add("RDZV_ID_MISMATCH", 0.85, f"the log shows {len(run_ids)} different run ids: {', '.join(run_ids[:4])}", evs)

    # Nobody hosts the store: connect failures to the endpoint from several hosts, or from the endpoint itself.
    unresolved = _unresolved_hosts(col)
    store_fails = [v for v in col.sig_values("RDZV_HOST_NOT_SELF_RECOGNIZED")
                   if v[0].get("host", "").strip() not in unresolved]  # a name that did not resolve: DNS, not this
    if store_fails and "store_hosted" not in col.facts:
        hosts = {h for _, h, _ in store_fails if h}
        targets = {g.get("host") for g, _, _ in store_fails if g.get("host")}
        self_fail = hosts & targets
        evs = col.sig_evidence(["RDZV_HOST_NOT_SELF_RECOGNIZED"])
        if self_fail:
            add("RDZV_HOST_NOT_SELF_RECOGNIZED", 0.75,
                f"{sorted(self_fail)[0]} cannot connect to a store at its own name: it did not start the store", evs)
        elif len(hosts) >= 2:
            add("RDZV_HOST_NOT_SELF_RECOGNIZED", 0.75,
                f"{len(hosts)} hosts ({', '.join(sorted(hosts)[:4])}) all fail to reach the store, and none logs "
                "that it hosts it", evs)

    # Watchdog timeouts that disagree across ranks. Only when each rank reports one collective: a rank
    # timing out at several sequence numbers belongs to several process groups, whose numbers differ anyway.
    wd = col.sig_values("NCCL_COLLECTIVE_TIMEOUT", "Watchdog")
    per_rank: dict[object, set[tuple[str, str]]] = {}
    for g, host, rank in wd:
        per_rank.setdefault((host, rank), set()).add((g.get("seq", ""), g.get("op", "")))
    if len(per_rank) >= 2 and all(len(v) == 1 for v in per_rank.values()) and None not in {r for _, r in per_rank}:
        seqs = {seq for v in per_rank.values() for seq, _ in v}
        ops = {op for v in per_rank.values() for _, op in v}
        evs = col.sig_evidence(["NCCL_COLLECTIVE_TIMEOUT"], "Watchdog")
        if len(ops) >= 2:
            add("COLLECTIVE_MISMATCH_ACROSS_RANKS", 0.6,
                f"ranks timed out in different collectives ({', '.join(sorted(ops))})", evs)
            add("UNEVEN_INPUTS_HANG", 0.3, "ranks timed out at different points", evs)
        elif len(seqs) >= 2:
            add("UNEVEN_INPUTS_HANG", 0.55,
                f"ranks timed out at different sequence numbers ({', '.join(sorted(seqs, key=int)[:4])}): "
                "some rank ran ahead or stopped early", evs)
            add("COLLECTIVE_MISMATCH_ACROSS_RANKS", 0.3, "ranks timed out at different sequence numbers", evs)

    # Every side of Gloo's full mesh timed out connecting: the addresses were exchanged through the store,
    # so the rendezvous worked, but no connection between the ranks got through.
    mesh = col.sig_evidence(["FIREWALL_BLOCKS_PORTS"], "connectFullMesh")
    mesh_hosts = {e.host for e in mesh if e.host}
    loopback = any(fid == "HOSTNAME_RESOLVES_TO_LOOPBACK" and st.signature.role != "symptom"
                   for (fid, _), st in col.sigs.items())
    if len(mesh_hosts) >= 2 and not loopback:
        add("FIREWALL_BLOCKS_PORTS", 0.4,
            f"Gloo timed out connecting on {len(mesh_hosts)} hosts ({', '.join(sorted(mesh_hosts)[:4])}) after the "
            "rendezvous exchanged their addresses: connections between the nodes are dropped", mesh[:2])

    # Different NCCL builds in one job.
    versions = col.fact_values("nccl_version", "v")
    if len(versions) >= 2:
        evs = [Evidence(v.line, v.text, v.host, v.rank) for v in col.facts.get("nccl_version", [])][:4]
        add("NCCL_VERSION_MISMATCH_ACROSS_NODES", 0.85, f"NCCL versions {', '.join(versions)} in one job", evs)

    # Two hosts with the same node rank (static rendezvous prints group_rank per agent).
    by_rank: dict[str, set[str]] = {}
    for v in col.facts.get("group_rank", []):
        if v.host:
            by_rank.setdefault(v.value.get("rank", ""), set()).add(v.host)
    dup = {r: hs for r, hs in by_rank.items() if len(hs) >= 2}
    if dup:
        r, hs = next(iter(dup.items()))
        evs = [Evidence(v.line, v.text, v.host, v.rank) for v in col.facts["group_rank"] if v.value.get("rank") == r]
        add("NODE_RANK_DUPLICATED", 0.85, f"hosts {', '.join(sorted(hs))} all have node rank {r}", evs[:4])

    # A hang on consumer GPUs: their P2P path is suspect when nothing else explains the timeout.
    geforce = col.sig_evidence(["CONSUMER_GPU_P2P_BROKEN"], "GeForce")
    hang = col.sig_evidence(["NCCL_COLLECTIVE_TIMEOUT"])
    if geforce and hang:
        add("CONSUMER_GPU_P2P_BROKEN", 0.35, "a collective hung on GeForce GPUs, whose P2P transport is often broken",
            hang[:1])
        add("NCCL_P2P_ACS_IOMMU_HANG", 0.2, "a collective hung on a single node's GPUs", hang[:1])
