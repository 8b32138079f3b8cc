"""From matched lines to ranked diagnoses: root causes first, symptoms after, each with evidence.

Confidence of a failure mode: the weights of its distinct matching signatures combined as
independent evidence (1 - prod(1 - w)), plus what the cross-line rules (rules.py) add. Then:

* consequences (collective timeouts, a dead store host, a generic NCCL system error) are demoted
  when the log also shows a root cause, and say which one;
* failure modes seen only through clues (INFO lines) are dropped when the log shows no failure;
* generic symptoms (NCCL system/internal error, CUDA OOM, invalid device ordinal) get a differential of
  specific causes from the rest of the log (differential.py); undecided, they stay the headline with a
  low confidence and a note saying what would decide;
* order: by confidence, except that of two related diagnoses (one lists the other, or one
  category) within 0.05 of each other the one with the earlier evidence goes first — the first
  specific error is usually the cause and what follows its consequence. Between unrelated modes
  line order proves nothing: a near-tie is said to be one (a note), not decided by position.

The cross-line rules live in rules.py; the bounded per-signature tallies in evidence.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
import re
from typing import Iterable

from ddpdoctor.catalog.model import CLUE, CONSEQUENCE, FailureMode
from ddpdoctor.logscan.differential import Caps, differential
from ddpdoctor.logscan.evidence import Collector, Evidence
from ddpdoctor.logscan.matcher import split_origin
from ddpdoctor.logscan.rules import cross_line_rules, explained_hits, lookup_warning_only, store_barrier_overfull
from ddpdoctor.logscan.user_error import user_code_rule

MIN_CONFIDENCE = 0.2
MAX_CONFIDENCE = 0.97
CLUE_ONLY_MAX = 0.3
CLOSE = 0.05


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


def _combine(weights: Iterable[float]) -> float:
    p = 1.0
    for w in weights:
        p *= 1.0 - w
    return min(MAX_CONFIDENCE, 1.0 - p)


def _related(a: FailureMode, b: FailureMode) -> bool:
    """Line order only says which came first among modes of one story (one lists the other, or they share a
    category); between unrelated modes it says nothing about the cause (issue 11)."""
    return b.id in a.related or a.id in b.related or a.category == b.category


def _mark_ties(out: list[Diagnosis]) -> None:
    # Unrelated modes within CLOSE: say the log does not decide, rather than let the order pretend it does.
    for a, b in zip(out, out[1:]):
        if a.confidence - b.confidence <= CLOSE and not _related(a.failure, b.failure) and a.confidence >= 0.35:
            a.notes.append(f"about as likely as {b.failure.id}: this log does not decide between them; "
                           f"`ddpdoctor explain {b.failure.id}` says what would confirm it")


_STAMP = re.compile(r"\d+")


def _collapse(evs: list[Evidence]) -> list[Evidence]:
    """The same message from several ranks or launchers (each rank prints it; pdsh and torchrun both echo it) is
    one piece of evidence, as a person reads it: keep the first, say who else printed it."""
    out: list[Evidence] = []
    seen: dict[str, tuple[Evidence, set, int]] = {}
    for e in evs:
        body = _STAMP.sub("#", split_origin(e.text)[0])
        if body in seen:
            first, who, n = seen[body]
            who.add(e.rank if e.rank is not None else e.host)
            seen[body] = (first, who, n + 1)
            continue
        seen[body] = (e, {e.rank if e.rank is not None else e.host}, 1)
        out.append(e)
    for i, e in enumerate(out):
        first, who, n = seen[_STAMP.sub("#", split_origin(e.text)[0])]
        if n > 1:  # a copy: the same Evidence may back several diagnoses
            names = sorted(str(w) for w in who if w is not None)
            also = f"the same line {n} times" + (f" (ranks/hosts {', '.join(names[:8])})" if len(names) > 1 else "")
            out[i] = replace(e, note=f"{e.note}; {also}" if e.note else also)
    return out


def diagnose(col: Collector, catalog: dict[str, FailureMode]) -> list[Diagnosis]:
    weights: dict[str, list[float]] = {}
    evidence: dict[str, list[Evidence]] = {}
    roles: dict[str, set[str]] = {}
    explained, explained_notes = explained_hits(col)
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

    cross_line_rules(col, add)
    store_barrier_overfull(col, add)
    root_rank = col.summary.get("rank")
    user_code_rule(col, add, int(root_rank) if root_rank is not None and str(root_rank).isdigit() else None)
    caps = Caps()  # generic symptoms: their differential, and a low cap when the log does not decide
    differential(col, add, caps)
    lookup_warning_only(col, caps)

    out: list[Diagnosis] = []
    for fid, ws in weights.items():
        fm = catalog[fid]
        evs = _collapse(sorted({e.line: e for e in evidence.get(fid, [])}.values(), key=lambda e: e.line))
        clue_only = roles.get(fid, set()) <= {CLUE}
        if clue_only and not col.failed:
            continue  # an INFO line in a log that shows no failure is not a diagnosis
        conf = min(_combine(ws), caps.cap.get(fid, 1.0))
        notes.setdefault(fid, []).extend(caps.notes.get(fid, []))
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
    out.sort(key=lambda d: (-d.confidence, d.failure.id))  # a neutral order; line order only among related modes, below
    # Among causes within CLOSE of each other, the earlier evidence goes first: the first specific error
    # is usually the cause, and what follows it its fallout.
    for _ in range(len(out)):
        moved = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if (a.failure.kind == b.failure.kind and a.confidence - b.confidence <= CLOSE
                    and b.first_line < a.first_line and _related(a.failure, b.failure)):
                out[i], out[i + 1] = b, a
                moved = True
        if not moved:
            break
    _mark_ties(out)
    return out


__all__ = ["Collector", "Evidence", "Diagnosis", "diagnose"]
