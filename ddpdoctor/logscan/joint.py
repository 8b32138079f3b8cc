"""`explain --log a --log b`: one conclusion over several ranks' or nodes' logs.

Each log is explained on its own first (logscan.explain_stream); this module only compares what the
explanations already hold: the rendezvous endpoint each log shows (Confirm: master and port) and
each log's best diagnosis. Rules, strongest first:
1. The logs' launch configurations show different rendezvous ports: processes started with different
   MASTER_PORT / --rdzv-endpoint never meet, whatever else each log says (an observation, not a guess).
2. One log's best diagnosis is a root cause and the others' are consequences: the cause is there.
3. Every log has the same best diagnosis: they agree.
4. Otherwise the logs disagree and which failed first decides: the first rank to fail stops answering, and the
   others' collectives time out or lose their peer after it (the NCCL watchdog, Gloo's pair, torchrun's teardown
   of the remaining workers). When every log's best diagnosis rests on a line with a timestamp of one format (glog's
   `E1112 23:34:28.613` of c10d and torchrun's agent, or a date and time), the earliest by a second or more is the
   first failure (medium: node clocks may differ, but NTP keeps them well inside a second). Otherwise: unknown, with
   what would tell.

"Every log" means every log: agreement among the logs that name something, beside one that names nothing, is not
rule 3 (the silent log may hold the cause the others only show the fallout of).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ddpdoctor.catalog.model import CONSEQUENCE, Confirm

_UNKNOWN = Confirm()


@dataclass(frozen=True)
class Joint:
    conclusion: str
    confidence: str                       # "high" (an observation), "medium", "unknown"
    evidence: tuple[str, ...] = ()
    fix: str = ""
    commands: tuple[str, ...] = ()
    failure: str = ""                     # the failure id the conclusion names, when one
    per_log: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"conclusion": self.conclusion, "confidence": self.confidence, "evidence": list(self.evidence),
                "fix": {"summary": self.fix, "commands": list(self.commands)}, "failure": self.failure,
                "logs": self.per_log}


def _endpoint(ex) -> tuple[str | None, str | None]:
    """(master, port) for the per-log summary: the values the confirm commands use."""
    c = ex.confirm
    return (None if c.master == _UNKNOWN.master else c.master, None if c.port == _UNKNOWN.port else c.port)


def _launch_port(ex) -> str | None:
    """The one rendezvous port the log's launch configuration shows (None when none, or several)."""
    ports = getattr(ex, "launch_ports", ())
    return ports[0] if len(ports) == 1 else None


def judge(explanations) -> Joint | None:
    """The joint conclusion over two or more explanations (None for fewer)."""
    exs = list(explanations)
    if len(exs) < 2:
        return None
    best = {ex.source: (ex.diagnoses[0] if ex.diagnoses else None) for ex in exs}
    per_log = {ex.source: {"best": best[ex.source].failure.id if best[ex.source] else None,
                           "master": _endpoint(ex)[0], "port": _endpoint(ex)[1]} for ex in exs}
    # only what each launch was configured with counts here (a socket error's port may be the c10d
    # agent's second, ephemeral store); hosts are left out: one node may name the master by its IP,
    # another by its name
    ports = {ex.source: _launch_port(ex) for ex in exs if _launch_port(ex)}
    if len(set(ports.values())) > 1:
        listing = ", ".join(f"{src}: {v}" for src, v in ports.items())
        return Joint(
            f"the logs disagree on the rendezvous port ({listing}): processes started with different "
            "MASTER_PORT / --master-port / --rdzv-endpoint ports never meet; each side waits for the others "
            "until its timeout", "high", tuple(f"{src} shows port {v}" for src, v in ports.items()),
            "give every node of the job the same endpoint, chosen once per job (never $RANDOM per node)",
            ("torchrun --rdzv-endpoint=<master>:$((20000 + SLURM_JOB_ID % 10000)) ...   # Slurm: one port per job",),
            per_log=per_log)
    named = {src: d for src, d in best.items() if d is not None}
    if not named:
        return Joint("no log shows a known failure signature", "unknown", per_log=per_log)
    roots = {src: d for src, d in named.items() if d.failure.kind != CONSEQUENCE}
    ids = {d.failure.id for d in named.values()}
    if len(ids) == 1 and len(named) == len(exs):
        (fid,) = ids
        return Joint(f"every log points at {fid}: {next(iter(named.values())).failure.title}",
                     "medium", tuple(f"{src}: {d.failure.id} ({d.confidence:.0%})" for src, d in named.items()),
                     failure=fid, per_log=per_log)
    if len(ids) == 1:   # the logs that name something agree; the others name nothing
        (fid,) = ids
        d = next(iter(named.values()))
        silent = ", ".join(ex.source for ex in exs if ex.source not in named)
        cause = d.failure.kind != CONSEQUENCE
        return Joint(f"{', '.join(named)} point{'s' if len(named) == 1 else ''} at {fid} ({d.failure.title}); {silent} "
                     "show{} no known failure".format("s" if "," not in silent else "") +
                     ("" if cause else f": {fid} is a consequence, and its cause may be in the first error of {silent}"),
                     "medium" if cause else "unknown",
                     tuple(f"{src}: {x.failure.id} ({x.confidence:.0%})" for src, x in named.items()),
                     "" if cause else f"the first error of {silent} (`ddpdoctor explain --log` shows it under "
                     "\"No known failure signature\")", failure=fid if cause else "", per_log=per_log)
    if len(roots) == 1 and len(named) > 1:
        (src, d), = roots.items()
        others = ", ".join(f"{s}: {x.failure.id}" for s, x in named.items() if s != src)
        return Joint(f"the cause is in {src}: {d.failure.id} ({d.failure.title}); the other logs show its "
                     f"consequences ({others})", "medium",
                     tuple(f"{s}: {x.failure.id} ({'consequence' if x.failure.kind == CONSEQUENCE else 'root cause'}, "
                           f"{x.confidence:.0%})" for s, x in named.items()),
                     failure=d.failure.id, per_log=per_log)
    first = _first_in_time(named)
    if first:
        src, d, stamp, gap = first
        others = ", ".join(f"{s}: {x.failure.id}" for s, x in named.items() if s != src)
        return Joint(f"the first failure is in {src}: {d.failure.id} ({d.failure.title}) at {stamp}, {gap:g} s "
                     f"before the other logs' ({others}), which followed it", "medium",
                     tuple(f"{s}: {x.failure.id} ({x.confidence:.0%}), first at {_stamp_text(x)}"
                           for s, x in named.items()),
                     f"the first failure's (`ddpdoctor explain {d.failure.id}`); with a gap of a few seconds, check "
                     "that the nodes' clocks agree (`chronyc tracking` on each)",
                     failure=d.failure.id, per_log=per_log)
    listing = "; ".join(f"{s}: {x.failure.id}" for s, x in named.items())
    return Joint(f"the logs disagree ({listing}); which failed first decides", "unknown",
                 tuple(f"{s}: {x.failure.id} ({x.confidence:.0%})" for s, x in named.items()),
                 "compare the first error's timestamp in each log, or torchrun's 'Root Cause (first observed "
                 "failure)' section", per_log=per_log)


# glog's prefix (c10d's C++ logging, torchrun's agent in torch 2.x: `E1112 23:34:28.613510957 ProcessGroupNCCL.cpp:616]`,
# `E1119 08:26:02.715000 28705 .../api.py:882]`): month, day and time, no year. A date and time (Python logging's
# `2024-05-01 10:00:11,123`, torchrun's summary `time : 2024-05-01_10:00:11`, ISO 8601).
_GLOG = re.compile(r"\b[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?\b")
_DATE = re.compile(r"\b(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
MIN_GAP_S = 1.0


def _stamp(text: str) -> tuple[str, float, str] | None:
    """(format, seconds on a scale common to that format, the stamp as written) of a line, or None."""
    m = _DATE.search(text)
    if m:
        y, mo, d, h, mi, s, frac = m.groups()
        days = (int(y) * 12 + int(mo)) * 31 + int(d)   # an order, not a calendar: enough to compare two stamps
        return "date", days * 86400 + int(h) * 3600 + int(mi) * 60 + int(s) + float("0." + (frac or "0")), m.group(0)
    m = _GLOG.search(text)
    if m:
        mo, d, h, mi, s, frac = m.groups()
        days = int(mo) * 31 + int(d)
        return "glog", days * 86400 + int(h) * 3600 + int(mi) * 60 + int(s) + float("0." + (frac or "0")), m.group(0)
    return None


def _first_stamp(d) -> tuple[str, float, str] | None:
    for e in sorted(d.evidence, key=lambda e: e.line):
        st = _stamp(e.text)
        if st:
            return st
    return None


def _stamp_text(d) -> str:
    st = _first_stamp(d)
    return st[2] if st else "no timestamp"


def _first_in_time(named: dict) -> tuple[str, object, str, float] | None:
    """The log whose best diagnosis's first stamped line is the earliest, by MIN_GAP_S or more, when every log's
    stamps have one format."""
    stamps = {src: _first_stamp(d) for src, d in named.items()}
    if len(stamps) < 2 or any(st is None for st in stamps.values()) or len({st[0] for st in stamps.values()}) > 1:
        return None
    order = sorted(stamps.items(), key=lambda kv: kv[1][1])
    (src, st), (_, nxt) = order[0], order[1]
    gap = nxt[1] - st[1]
    if gap < MIN_GAP_S:
        return None
    return src, named[src], st[2], round(gap, 1)


def lines(j: Joint) -> list[str]:
    """The text section printed after the per-log explanations."""
    out = ["", f"all {len(j.per_log)} logs together ({j.confidence}{' confidence' if j.confidence != 'unknown' else ''}):",
           f"  {j.conclusion}"]
    out += [f"    {e}" for e in j.evidence]
    if j.fix:
        out.append(f"  fix: {j.fix}")
    out += [f"    $ {c}" for c in j.commands]
    return out
