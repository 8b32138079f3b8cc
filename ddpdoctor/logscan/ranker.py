"""From matched lines to ranked diagnoses: root causes first, symptoms after, each with evidence.

Confidence of a failure mode: the weights of its distinct matching signatures combined as
independent evidence (1 - prod(1 - w)), plus what the cross-line rules (rules.py) add. Then:

* consequences (collective timeouts, a dead store host, a generic NCCL system error) are demoted
  when the log also shows a root cause, and say which one;
* failure modes seen only through clues (INFO lines) are dropped when the log shows no failure;
* generic symptoms (NCCL system/internal error, CUDA OOM, invalid device ordinal) get a differential of
  specific causes from the rest of the log (differential.py); undecided, they stay the headline with a
  low confidence and a note saying what would decide;
* calibration: a diagnosis is given with high confidence (LOW and up, see render.py) only when decisive
  evidence backs it: a cause line of its own (role "cause", weight >= DECISIVE, not a pattern of
  catalog/shared.toml, and not a line another mode explains as well, unless that mode's pattern is merely
  broader), or a cross-line rule of that strength. A diagnosis built from shared lines only (a watchdog
  timeout every hang ends in, a store connect timeout, `Connection refused`, an NCCL system error) is
  capped at UNDECIDED_MAX: still named, but marked low confidence with what would decide it;
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

from ddpdoctor.catalog.model import CAUSE, CLUE, CONSEQUENCE, FailureMode
from ddpdoctor.logscan.calibration import CLUE as CLUE_BASIS
from ddpdoctor.logscan.calibration import CLUE_ONLY_MAX, LOW, MIN_CONFIDENCE, RULE, SHOW_FULL, calibrate
from ddpdoctor.logscan.clues import clue_candidates, told_failure
from ddpdoctor.logscan.differential import Caps, differential
from ddpdoctor.logscan.native import sigbus_in_nccl
from ddpdoctor.logscan.evidence import Collector, Evidence
from ddpdoctor.logscan.matcher import split_origin
from ddpdoctor.logscan.symptoms import symptom_differential
from ddpdoctor.logscan.members import duplicate_members
from ddpdoctor.logscan.rules import (cross_line_rules, deepspeed_teardown, driver_older_than_build, explained_hits,
                                     gid_kind_fits, lookup_warning_only, nccl_release_bug, port_after_rendezvous,
                                     store_barrier_overfull)
from ddpdoctor.logscan.user_error import cut_traceback_rule, user_code_rule

MAX_CONFIDENCE = 0.97
CLOSE = 0.05
DECISIVE = 0.5        # a cause line (or rule) at least this strong can decide a log on its own
UNDECIDED_MAX = 0.45  # the most a diagnosis without decisive evidence gets: below render.LOW ("low confidence")


@dataclass
class Diagnosis:
    failure: FailureMode
    confidence: float
    evidence: list[Evidence]
    notes: list[str] = field(default_factory=list)
    consequence_of: str | None = None
    clue_only: bool = False
    score: float = 0.0    # the confidence before the calibration cap: orders diagnoses capped alike
    basis: str = ""       # the strongest signature behind it ("rule" when only rules): calibration.py's key

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
    # rounded, so that the threshold below decides and not the float: 1 - (1 - 0.2) is 0.19999999999999996
    return min(MAX_CONFIDENCE, round(1.0 - p, 9))


def _related(a: FailureMode, b: FailureMode) -> bool:
    """Line order only says which came first among modes of one story (one lists the other, or they share a
    category); between unrelated modes it says nothing about the cause (issue 11)."""
    return b.id in a.related or a.id in b.related or a.category == b.category


def _mark_ties(out: list[Diagnosis]) -> None:
    # Unrelated modes within CLOSE: say the log does not decide, rather than let the order pretend it does; and
    # a log that does not decide between its first two answers gives neither with high confidence.
    for i, (a, b) in enumerate(zip(out, out[1:])):
        if a.score - b.score <= CLOSE and not _related(a.failure, b.failure) and a.confidence >= 0.35:
            a.notes.append(f"about as likely as {b.failure.id}: this log does not decide between them; "
                           f"`ddpdoctor explain {b.failure.id}` says what would confirm it")
            if i == 0:
                for d in (a, b):
                    d.confidence = min(d.confidence, UNDECIDED_MAX)


# torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, WorkNCCL::handleException (v1.10 .. v2.13; handleNCCLGuard in
# v1.8-1.9): whenever a work item holds an exception -- an NCCL error, a CUDA error, or the watchdog's timeout -- it
# logs "Some NCCL operations have failed or timed out ..." and then rethrows, so the exception's own text (`what():
# NCCL error: unhandled system error`, `CUDA error: ...`) follows the line. Alone the line says only "failed or timed
# out"; beside another failure line and no timeout line it announces that failure, not a timeout.
_ANNOUNCE = ("NCCL_COLLECTIVE_TIMEOUT", "SOME_NCCL_OPERATIONS_HAVE_FAILED")


def _announced_error(col: Collector) -> set:
    """The handleException hits to leave out: the log shows the error they announce and no timeout line."""
    announce = {k for k, st in col.sigs.items() if (k[0], st.signature.name) == _ANNOUNCE}
    if not announce:
        return set()
    for (fid, _), st in col.sigs.items():
        if fid == _ANNOUNCE[0] and st.signature.name != _ANNOUNCE[1] and st.signature.role != CLUE:
            return set()   # a watchdog timeout line (or another timeout wording): it may well be a timeout
    other = any(fid != _ANNOUNCE[0] and st.signature.role != CLUE and fid not in _TEARDOWN
                for (fid, _), st in col.sigs.items())
    return announce if other else set()


# What every failure ends in, whatever failed first: the launcher's report of a worker's exit signal, a dead peer's
# closed connection. They are never the "other failure" that a handleException line announces.
_TEARDOWN = frozenset({"WORKER_NATIVE_CRASH", "DEEPSPEED_LAUNCHER_TEARDOWN"})


def _first_failure_first(out: list[Diagnosis], own: dict[str, int]) -> None:
    """A consequence the log does not decide (below render.LOW) stays first only when nothing of its story failed
    before it. When a mode of the same story (catalog `related` or one category) shows a failure line of its own
    (a signature's, not a candidate the differential raised) before the consequence's first line, that failure
    went first: the rank that failed first stops answering and the others' collectives time out after it (torch's
    watchdog: ProcessGroupNCCL.cpp, the timeout follows a peer's exit), and torchrun then tears the rest down
    (elastic/agent/server/api.py). It goes first, and the consequence is said to be its consequence."""
    if len(out) < 2:
        return
    top = out[0]
    if top.failure.kind != CONSEQUENCE or top.confidence >= LOW or top.failure.id not in own:
        return
    for i, d in enumerate(out[1:3], 1):
        line = own.get(d.failure.id)
        if (line is not None and line < own[top.failure.id] and not d.clue_only and d.confidence >= SHOW_FULL
                and _related(top.failure, d.failure)):
            out.pop(0)
            top.consequence_of = d.failure.id
            top.confidence *= 0.6   # as a consequence beside a root cause (diagnose), and ranked by it
            top.score *= 0.6
            top.notes.insert(0, f"after {d.failure.id}'s first error (line {line}): what a peer's failure leaves "
                                "the other ranks with")
            at = next((j for j, x in enumerate(out) if j >= i and x.confidence < top.confidence), len(out))
            out.insert(at, top)
            return


def _undecided_note(fm: FailureMode) -> str:
    decide = "its confirm step below" if fm.confirm else f"`ddpdoctor explain {fm.id}` (what confirms it)"
    return ("low confidence: every line behind it is one that other failures print as well (a symptom or a "
            f"consequence, not a line that names this cause); what would decide: {decide}, and the first error "
            "of the rank that failed first")


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


_BROADER: dict[int, dict[tuple[str, str], set[tuple[str, str]]]] = {}


def _broader(catalog: dict[str, FailureMode]) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """Per signature (mode id, name): the other modes' signatures that are broader patterns for its line (they
    match its example, it does not match theirs), as a plain name lookup failure is to a Kubernetes service
    name's. A broader match on the same line leaves the narrower signature decisive; a peer's does not."""
    key = id(catalog)
    if key not in _BROADER:
        sigs = [(fid, s) for fid, fm in catalog.items() for s in fm.signatures if s.role != CLUE]
        out: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for fid, s in sigs:
            if s.role != CAUSE or not s.example:
                continue
            out[(fid, s.name)] = {(f2, s2.name) for f2, s2 in sigs if f2 != fid and s2.regex.search(s.example)
                                  and not (s2.example and s.regex.search(s2.example))}
        _BROADER.clear()
        _BROADER[key] = out
    return _BROADER[key]


def _decisive(col: Collector, catalog: dict[str, FailureMode], explained: set) -> set[str]:
    """The modes with a decisive line of their own (see the module's doc)."""
    on_line: dict[int, list[tuple[str, str]]] = {}
    live = [(k, st) for k, st in col.sigs.items() if k not in explained and st.signature.role != CLUE]
    for (fid, _), st in live:
        for e in st.first + ([st.last] if st.last else []):
            on_line.setdefault(e.line, []).append((fid, st.signature.name))
    broader = _broader(catalog)
    out: set[str] = set()
    for (fid, _), st in live:
        s = st.signature
        if s.role != CAUSE or s.weight < DECISIVE or s.shared or fid in out:
            continue
        wider = broader.get((fid, s.name), set())
        for e in st.first + ([st.last] if st.last else []):
            if all(f2 == fid or (f2, n2) in wider for f2, n2 in on_line.get(e.line, ())):
                out.add(fid)
                break
    return out


def diagnose(col: Collector, catalog: dict[str, FailureMode]) -> list[Diagnosis]:
    weights: dict[str, list[float]] = {}
    evidence: dict[str, list[Evidence]] = {}
    roles: dict[str, set[str]] = {}
    explained, explained_notes = explained_hits(col)
    explained |= _announced_error(col)
    covered: dict[str, set[int]] = {}
    own: dict[str, int] = {}      # per mode, its first failure line of its own (a cause/symptom signature)
    basis: dict[str, str] = {}    # per mode, the strongest signature behind it (calibration.py)
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
        if st.signature.role != CLUE:
            basis.setdefault(fid, st.signature.name)
            if lines:
                own[fid] = min(own.get(fid, min(lines)), min(lines))
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

    decisive = _decisive(col, catalog, explained)

    def add(fid: str, weight: float, note: str, evs: Iterable[Evidence] = ()) -> None:
        if weight >= DECISIVE:
            decisive.add(fid)
        weights.setdefault(fid, []).append(weight)
        roles.setdefault(fid, set()).add("rule")
        notes.setdefault(fid, []).append(note)
        evidence.setdefault(fid, []).extend(evs)

    cross_line_rules(col, add)
    store_barrier_overfull(col, add)
    deepspeed_teardown(col, add)
    nccl_release_bug(col, add)
    driver_older_than_build(col, add)
    duplicate_members(col, add)
    root_rank = col.summary.get("rank")
    user_code_rule(col, add, int(root_rank) if root_rank is not None and str(root_rank).isdigit() else None)
    cut_traceback_rule(col, add)
    caps = Caps()  # generic symptoms: their differential, and a low cap when the log does not decide
    differential(col, add, caps)
    symptom_differential(col, add, caps, set(decisive),
                         lambda: {f: (_combine(ws), "rule" in roles.get(f, ())) for f, ws in weights.items()})
    sigbus_in_nccl(col, add, caps)
    lookup_warning_only(col, caps)
    gid_kind_fits(col, caps)
    port_after_rendezvous(col, caps)
    failed = col.failed or told_failure(col)   # a clue line that says the job failed (clues.TOLD_FAILURE)
    clue_candidates(col, catalog, set(decisive), explained,
                    lambda: {f: (_combine(ws), "rule" in roles.get(f, ())) for f, ws in weights.items()}, add, caps,
                    failed)

    out: list[Diagnosis] = []
    for fid, ws in weights.items():
        fm = catalog[fid]
        evs = _collapse(sorted({e.line: e for e in evidence.get(fid, [])}.values(), key=lambda e: e.line))
        clue_only = roles.get(fid, set()) <= {CLUE}
        if clue_only and not failed:
            continue  # an INFO line in a log that shows no failure is not a diagnosis
        conf = min(_combine(ws), caps.cap.get(fid, 1.0))
        notes.setdefault(fid, []).extend(caps.notes.get(fid, []))
        if clue_only:  # INFO lines alone only make a failure possible, never likely
            conf = min(conf, CLUE_ONLY_MAX)
        if conf > fm.ceiling:  # a mode that says what happened, never why (catalog `ceiling`)
            conf = fm.ceiling
            notes.setdefault(fid, []).append(f"low confidence: this says what happened, not why; what would decide: "
                                             f"{fm.undecided or 'the first error of the rank that failed first'}")
        # a reading with no failure line of its own but clue lines (a GeForce card, a WSL kernel, a poster's "works
        # with NCCL_P2P_DISABLE=1"), which a rule or clues.py lifted to a candidate, rests on those clues: its own
        # calibration key (calibration.CLUE), apart from the rules' readings of failure lines (a CUDA error's candidates)
        out.append(Diagnosis(fm, conf, evs, notes.get(fid, []), clue_only=clue_only, score=conf,
                             basis=basis.get(fid, CLUE_BASIS if CLUE in roles.get(fid, ()) else RULE)))
    roots = [d for d in out if d.failure.kind != CONSEQUENCE and d.confidence >= 0.5 and not d.clue_only]
    if roots:
        top = max(roots, key=lambda d: (d.confidence, -d.first_line))
        for d in out:
            if d.failure.kind == CONSEQUENCE:
                d.confidence *= 0.6
                d.score *= 0.6
                d.consequence_of = top.failure.id
    for d in out:
        if d.confidence > UNDECIDED_MAX and d.failure.id not in decisive:
            d.confidence = UNDECIDED_MAX
            if not any(n.startswith("low confidence") for n in d.notes):  # a rule may already say what decides
                d.notes.append(_undecided_note(d.failure))
    # strictly above: a signature of weight MIN_CONFIDENCE (0.2: a watchdog line for UNEVEN_INPUTS_HANG, a store
    # connect timeout for FIREWALL_BLOCKS_PORTS, ...) only corroborates; alone it names nothing
    out = [d for d in out if d.confidence > MIN_CONFIDENCE]
    # a neutral order; line order only among related modes, below. At equal confidence, a diagnosis that some
    # failure line backs goes before one that only INFO lines (clues) make possible, and a root cause before a
    # consequence (both capped alike, e.g. at low confidence: a rank's own CUDA error beside the watchdog timeouts of
    # the ranks waiting for it; the consequence's higher uncapped score only says its line is more common).
    out.sort(key=lambda d: (-round(d.confidence, 6), d.clue_only, d.failure.kind == "consequence", -d.score,
                            d.failure.id))
    # Among causes within CLOSE of each other, the earlier evidence goes first: the first specific error
    # is usually the cause, and what follows it its fallout.
    for _ in range(len(out)):
        moved = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if (a.failure.kind == b.failure.kind and a.score - b.score <= CLOSE
                    and b.first_line < a.first_line and _related(a.failure, b.failure)):
                out[i], out[i + 1] = b, a
                moved = True
        if not moved:
            break
    _first_failure_first(out, own)
    _mark_ties(out)
    calibrate(out)
    return out


__all__ = ["Collector", "Evidence", "Diagnosis", "diagnose"]
