"""`ddpdoctor explain --log`: read a failed job's log, name the likely causes with their evidence.

    from ddpdoctor.logscan import explain_stream
    result = explain_stream(open("train.log", "rb"), source="train.log")
    for d in result.diagnoses: print(d.failure.id, d.confidence)

reader.py splits the stream into blocks of lines (constant memory), matcher.py finds the lines that
match catalog signatures and facts, ranker.py turns them into ranked diagnoses, render.py prints.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import BinaryIO

from ddpdoctor import catalog
from ddpdoctor.catalog.model import Confirm
from ddpdoctor.logscan.matcher import Matcher, ScanStats
from ddpdoctor.logscan.reader import CHUNK, CorruptInput
from ddpdoctor.logscan.ranker import Collector, Diagnosis, Evidence, diagnose

_MATCHER: Matcher | None = None


def default_matcher() -> Matcher:
    global _MATCHER
    if _MATCHER is None:
        _MATCHER = Matcher(catalog.failures())
    return _MATCHER


@dataclass
class Explanation:
    source: str
    diagnoses: list[Diagnosis]
    lines: int
    bytes: int
    duration_s: float
    first_failure: dict = field(default_factory=dict)   # torchrun's "Root Cause (first observed failure)"
    first_error: Evidence | None = None                 # first exception / torchrun failure line
    confirm: Confirm = field(default_factory=Confirm)   # master/port as the log shows them
    damaged: str = ""                                   # why the log could not be read to its end
    launch_ports: tuple[str, ...] = ()                  # the rendezvous ports the launch configuration shows
    cut: bool = False                                   # the deadline passed: the log was read only up to `bytes`


class _OutOfTime(Exception):
    """Raised from the scan's per-block callback when the deadline has passed (stops the scan generator)."""


# With a deadline, blocks of 1 MiB: the check between blocks then lands within ~0.3 s of it even on a log where
# every line matches (~60 us a line with the watchdog tap); a 300 MB ordinary log scans no slower than in 4 MiB
# blocks (0.9 s against 1.1-1.3 s of CPU here).
DEADLINE_CHUNK = 1 << 20

# A cut log may hide its cause in the part not read (the failure is usually near a log's end): nothing read
# before the cut is given with more than low confidence (ranker.UNDECIDED_MAX, below render.LOW).
CUT_NOTE = ("read in part: the deadline passed before the end of the log; the cause may be in the part "
            "not read (rerun with a larger --deadline)")


def explain_stream(stream: BinaryIO, source: str = "-", progress=None, stop_at: float | None = None) -> Explanation:
    """Scan `stream` and rank the causes; `progress(bytes_read)` is called after each block.

    `stop_at` (a time.monotonic() value): stop reading at the first block boundary past it and explain what
    was read (Explanation.cut; the diagnoses are capped at low confidence). The check runs per block of
    reader.CHUNK bytes, so a cut lands at most one block's scan after `stop_at`."""
    t0 = time.monotonic()
    m = default_matcher()
    col = Collector()
    stats = ScanStats()
    damaged = ""
    cut = stop_at is not None and t0 >= stop_at  # out of time before the first byte: read nothing

    def tick(done: int) -> None:
        if progress:
            progress(done)
        if stop_at is not None and time.monotonic() >= stop_at:
            raise _OutOfTime
    try:
        if not cut:
            for lm in m.scan(stream, stats, progress=tick if (progress or stop_at is not None) else None,
                             saturated=col.saturated, chunk=CHUNK if stop_at is None else DEADLINE_CHUNK):
                col.add(lm)
    except CorruptInput as e:  # explain what was readable; the caller reports the damage
        damaged = str(e)
    except _OutOfTime:
        cut = True
    col.lines = stats.lines   # where the log ends (endings.py: a log that stops in NCCL's set-up)
    diagnoses = diagnose(col, catalog.failures())
    if cut:
        from ddpdoctor.logscan.ranker import UNDECIDED_MAX
        for d in diagnoses:
            if d.confidence > UNDECIDED_MAX:
                d.confidence = UNDECIDED_MAX
            if CUT_NOTE not in d.notes:
                d.notes.insert(0, CUT_NOTE)
    first_error = None
    for name in ("exception", "torchrun_failed"):
        for v in col.facts.get(name, [])[:1]:
            if first_error is None or v.line < first_error.line:
                first_error = Evidence(v.line, v.text, v.host, v.rank)
    return Explanation(
        source=source, diagnoses=diagnoses, lines=stats.lines, bytes=stats.bytes,
        duration_s=time.monotonic() - t0, first_failure=_first_failure(col), first_error=first_error,
        confirm=_confirm_values(col, diagnoses), damaged=damaged, launch_ports=_launch_ports(col), cut=cut)


def _launch_ports(col: Collector) -> tuple[str, ...]:
    """Ports from the launch configuration only (torchrun's rdzv_endpoint, MASTER_PORT, master_port=),
    never a connect target: c10d's agent serves its workers a second store on an ephemeral port, so
    a port seen in a socket error may differ between two ranks of one healthy job (joint.py)."""
    ports = [v.value.get("port", "") for v in col.facts.get("rdzv_endpoint", [])]
    ports += col.fact_values("master_port", "port")
    return tuple(dict.fromkeys(p for p in ports if p))


def _first_failure(col: Collector) -> dict:
    s = col.summary
    if not s or not (s.get("host") or s.get("rank")):
        return {}
    out: dict = {"line": s["line"]}
    for k in ("host", "rank", "local_rank", "exit"):
        if s.get(k) is not None:
            out["exitcode" if k == "exit" else k] = s[k] if k == "host" else int(s[k])
    return out


def _confirm_values(col: Collector, diagnoses: list[Diagnosis]) -> Confirm:
    """The master and port to put in confirm commands, when the log names them and they are valid."""
    from ddpdoctor.validate import BadInput, validate_host, validate_port

    hosts: list[str] = []
    ports: list[str] = []
    for v in col.facts.get("rdzv_endpoint", []):
        hosts.append(v.value.get("host", ""))
        ports.append(v.value.get("port", ""))
    hosts += col.fact_values("master", "host")
    ports += col.fact_values("master_port", "port")
    hosts += col.fact_values("store_addr", "host")
    ports += col.fact_values("store_addr", "port")
    for d in diagnoses:  # connect targets in the evidence (store timeouts, gai errors)
        for (fid, _), st in col.sigs.items():
            if fid == d.failure.id:
                for groups, _, _ in st.values:
                    if groups.get("host") and groups.get("port"):
                        hosts.append(groups["host"])
                        ports.append(groups["port"])
    master = port = None
    for h in hosts:
        try:
            if h and h not in ("localhost", "127.0.0.1"):
                master = validate_host(h)
                break
        except BadInput:
            continue
    for p in ports:
        try:
            port = str(validate_port(p))
            break
        except BadInput:
            continue
    return Confirm(master or "<master>", port or "<port>")


__all__ = ["explain_stream", "Explanation", "Diagnosis", "Evidence", "default_matcher"]
