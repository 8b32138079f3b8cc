"""Bounded tallies of what the matcher found while the log streams by: per signature the first
lines, the last one and distinct captured values; per fact its values. Memory stays constant in
the size of the log (KEEP_* bound every list), and so does the work per line once a rule is
`saturated`: its lists are full, so one more matching line can only move its last line, which the
matcher then finds once per block instead of searching every line (matcher.Matcher.scan)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ddpdoctor.catalog.model import CLUE, FailureMode, Signature
from ddpdoctor.logscan.matcher import LineMatch, Rule
from ddpdoctor.logscan.quoted import Evidence
from ddpdoctor.logscan.user_error import Tracker

KEEP_EVIDENCE = 3    # first lines kept per signature (plus the last one)
KEEP_VALUES = 64     # distinct captured values kept per signature / fact
# facts whose every line counts (a traceback's frames, the torchrun summary, exceptions): never saturated
_EVERY_LINE = frozenset({"frame", "exception", "stop_sent", "root_cause", "summary_host", "summary_rank",
                         "summary_exit", "traceback", "torchrun_failed"})


@dataclass
class SigStats:
    signature: Signature
    count: int = 0    # lines searched that matched (a saturated rule's later lines are not searched)
    first: list[Evidence] = field(default_factory=list)
    last: Evidence | None = None
    values: list[tuple[dict, str | None, int | None]] = field(default_factory=list)  # (groups, host, rank)


@dataclass(slots=True)   # one per matched line: cheaper to make and to read
class FactValue:
    value: dict
    line: int
    text: str
    host: str | None
    rank: int | None


def _note(sig: Signature, groups: dict) -> str:
    if not sig.note:
        return ""
    try:
        return sig.note.format(**groups)
    except (KeyError, IndexError, ValueError):
        return sig.note if "{" not in sig.note else ""


class Collector:
    """Accumulates matches in bounded memory while the log streams by."""

    def __init__(self):
        self.user = Tracker()   # exceptions in the job's own code (user_error.py)
        self.sigs: dict[tuple[str, int], SigStats] = {}   # (failure id, rule index) -> stats
        self.failures: dict[str, FailureMode] = {}
        self.facts: dict[str, list[FactValue]] = {}
        self.fact_counts: dict[str, int] = {}
        self.failed = False   # any cause/symptom line, exception or torchrun failure seen
        self.summary: dict = {}   # torchrun's "Root Cause (first observed failure)" block
        self._in_summary = 0
        self.saturated: set[int] = set()   # rule indexes one more line of can only move a last line (matcher.scan)
        self.lines = 0   # the log's line count, set once the scan is done (0: unknown)

    def add(self, lm: LineMatch) -> None:
        # a line a catalog cause/symptom explains is not an unexplained exception of the job's code
        explained = exception = False
        for r, _ in lm.matches:   # one pass (per matched line: a log of tracebacks has many)
            if r.fact is None:
                explained = explained or (r.signature is not None and r.signature.role != CLUE)
            elif r.fact.name == "exception":
                exception = True
        # (Tracker.next_line reads only the line right under the last exception kept)
        if self.user.raised and not exception and lm.line == self.user.raised[-1].ev.line + 1:
            self.user.next_line(Evidence(lm.line, lm.text, lm.host, lm.rank), explained)
        for rule, groups in lm.matches:
            if rule.fact is not None:
                self._add_fact(rule, groups, lm, explained)
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
            if st.last is not None and (len(st.values) >= KEEP_VALUES or not rule.regex.py.groupindex):
                self.saturated.add(rule.index)

    def _add_fact(self, rule: Rule, groups: dict, lm: LineMatch, explained: bool = False) -> None:
        name = rule.fact.name  # type: ignore[union-attr]
        if name == "frame":
            self.user.frame(groups, Evidence(lm.line, lm.text, lm.host, lm.rank))
            return  # frames are many: only the tracker keeps them (bounded)
        if name == "exception":
            self.user.exception(groups, Evidence(lm.line, lm.text, lm.host, lm.rank), explained)
        elif name == "stop_sent":
            self.user.stop(Evidence(lm.line, lm.text, lm.host, lm.rank), groups.get("sig", ""))
        if name in ("exception", "torchrun_failed", "traceback"):
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
        elif len(vals) >= KEEP_VALUES and name not in _EVERY_LINE and not name.startswith("summary_"):
            self.saturated.add(rule.index)

    # -- helpers for rules
    def fact_values(self, name: str, key: str) -> list[str]:
        out: list[str] = []
        for v in self.facts.get(name, []):
            x = v.value.get(key)
            if x is not None and x not in out:
                out.append(x)
        return out

    def cuda_build_and_driver(self) -> tuple[FactValue, FactValue, tuple[int, int], tuple[int, int]] | None:
        """The newest CUDA an NCCL build in the log was built for (`NCCL version 2.18.1+cuda12.1`) and the oldest CUDA
        the driver supports (`cudaDriverVersion 11080`, cuDriverGetVersion: 1000 * major + 10 * minor): (build line,
        driver line, (major, minor) built, (major, minor) of the driver); None when either is missing."""
        builds = [v for v in self.facts.get("nccl_version", []) if v.value.get("cuda")]
        drivers = self.facts.get("cuda_driver_version", [])
        if not builds or not drivers:
            return None
        def cuda(v: FactValue) -> tuple[int, int]:
            major, minor = v.value["cuda"].split(".")[:2]   # the fact's `\d+\.\d+`
            return int(major), int(minor)
        build = max(builds, key=cuda)
        driver = min(drivers, key=lambda v: int(v.value["v"]))
        return build, driver, cuda(build), divmod(int(driver.value["v"]) // 10, 100)

    def sig_values(self, failure_id: str, name: str = "") -> list[tuple[dict, str | None, int | None]]:
        """Captured values of `failure_id`'s signature called `name` (all its signatures when empty)."""
        out = []
        for (fid, _), st in self.sigs.items():
            if fid == failure_id and name in ("", st.signature.name):
                out.extend(st.values)
        return out

    def sig_evidence(self, failure_ids: Iterable[str], name: str = "") -> list[Evidence]:
        out = []
        ids = set(failure_ids)
        for (fid, _), st in self.sigs.items():
            if fid in ids and name in ("", st.signature.name):
                out.extend(st.first)
                if st.last:
                    out.append(st.last)
        return sorted({e.line: e for e in out}.values(), key=lambda e: e.line)
