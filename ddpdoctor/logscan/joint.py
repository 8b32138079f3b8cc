"""`explain --log a --log b`: one conclusion over several ranks' or nodes' logs.

Each log is explained on its own first (logscan.explain_stream); this module only compares what the
explanations already hold: the rendezvous endpoint each log shows (Confirm: master and port) and
each log's best diagnosis. Rules, strongest first:
1. The logs' launch configurations show different rendezvous ports: processes started with different
   MASTER_PORT / --rdzv-endpoint never meet, whatever else each log says (an observation, not a guess).
2. One log's best diagnosis is a root cause and the others' are consequences: the cause is there.
3. Every log has the same best diagnosis: they agree.
4. Otherwise the logs disagree and which failed first decides: say so (unknown), with what would tell.
"""
from __future__ import annotations

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
    if len(ids) == 1:
        (fid,) = ids
        return Joint(f"every log points at {fid}: {next(iter(named.values())).failure.title}",
                     "medium", tuple(f"{src}: {d.failure.id} ({d.confidence:.0%})" for src, d in named.items()),
                     failure=fid, per_log=per_log)
    if len(roots) == 1 and len(named) > 1:
        (src, d), = roots.items()
        others = ", ".join(f"{s}: {x.failure.id}" for s, x in named.items() if s != src)
        return Joint(f"the cause is in {src}: {d.failure.id} ({d.failure.title}); the other logs show its "
                     f"consequences ({others})", "medium",
                     tuple(f"{s}: {x.failure.id} ({'consequence' if x.failure.kind == CONSEQUENCE else 'root cause'}, "
                           f"{x.confidence:.0%})" for s, x in named.items()),
                     failure=d.failure.id, per_log=per_log)
    listing = "; ".join(f"{s}: {x.failure.id}" for s, x in named.items())
    return Joint(f"the logs disagree ({listing}); which failed first decides", "unknown",
                 tuple(f"{s}: {x.failure.id} ({x.confidence:.0%})" for s, x in named.items()),
                 "compare the first error's timestamp in each log, or torchrun's 'Root Cause (first observed "
                 "failure)' section", per_log=per_log)


def lines(j: Joint) -> list[str]:
    """The text section printed after the per-log explanations."""
    out = ["", f"all {len(j.per_log)} logs together ({j.confidence}{' confidence' if j.confidence != 'unknown' else ''}):",
           f"  {j.conclusion}"]
    out += [f"    {e}" for e in j.evidence]
    if j.fix:
        out.append(f"  fix: {j.fix}")
    out += [f"    $ {c}" for c in j.commands]
    return out
