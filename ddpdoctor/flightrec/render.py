"""Text and JSON views of a Divergence and a WatchdogView. Renders only: the judging is done."""
from __future__ import annotations

import dataclasses
import math

from ddpdoctor.flightrec.divergence import _rl, _sz
from ddpdoctor.flightrec.model import Divergence


def _pgname(pg: str, desc: str) -> str:
    return f"pg {pg}" + (f" ({desc})" if desc else "")


def divergence_text(v: Divergence, source: str) -> str:
    out = [f"flight recorder: {len(v.ranks)} rank dump{'s' if len(v.ranks) != 1 else ''} from {source}"
           f" ({v.backend or 'unknown backend'})"]
    for g in v.groups:
        what = f"#{g.seq} {g.op}{_sz(g.input_sizes)}" if g.seq is not None else "no collective"
        name = _pgname(g.pg, g.pg_desc)
        if g.status == "diverged":
            out.append(f"✗ {name}: ranks diverge at collective {what}")
            out.append(f"    never entered it (origin): rank{'s' if len(g.not_entered) > 1 else ''} "
                       f"{_rl(g.not_entered)}" + _lasts(g, g.not_entered))
            out.append(f"    wait in it (victims):      ranks {_rl(g.waiting)}" if g.waiting else
                       "    no rank entered it")
        elif g.status == "mismatch":
            out.append(f"✗ {name}: ranks called different collectives at #{g.seq}")
            for var in g.variants:
                out.append(f"    rank{'s' if len(var.ranks) > 1 else ''} {_rl(var.ranks)}: {var.op}"
                           f"{_sz(var.input_sizes)}{' ' + ','.join(var.dtypes) if var.dtypes else ''}")
            if g.not_entered:
                out.append(f"    never entered it: ranks {_rl(g.not_entered)}")
        elif g.status == "stuck":
            out.append(f"! {name}: every dumped rank is in collective {what}, none completed it")
            out.append(f"    {g.note}")
        else:
            out.append(f"✓ {name}: no divergence; last collective {what}")
            if g.note:
                out.append(f"    {g.note}")
    if v.groups and v.groups[0].status in ("diverged", "mismatch"):
        g = v.groups[0]
        culprit = g.not_entered or (g.variants[-1].ranks if len(g.variants) > 1 else ())
        if culprit:
            out.append(f"  fix: look at what rank{'s' if len(culprit) > 1 else ''} {_rl(culprit)} did instead of "
                       f"{_pgname(g.pg, g.pg_desc)} collective #{g.seq} ({g.op}): a collective skipped or called "
                       f"out of order on some ranks (a rank-dependent branch, early exit, uneven data)")
    for n in v.notes:
        out.append(f"  note: {n}")
    return "\n".join(out) + "\n"


def _lasts(g, ranks) -> str:
    lasts = sorted({g.last_seq.get(r, 0) for r in ranks})
    if not lasts:
        return ""
    return f" (their last collective: #{', #'.join(map(str, lasts))})" if lasts != [0] else " (no collective at all)"


def watchdog_text(view) -> str:
    out = [f"watchdog: per-rank progress from {view.lines} line{'s' if view.lines != 1 else ''}"]
    for w in view.groups:
        name = _pgname(w.pg, w.pg_desc)
        op = f" {w.op}" if w.op else ""
        if w.origin:
            out.append(f"✗ {name}: stuck at work #{w.stuck_seq}{op}; never entered it (origin): rank"
                       f"{'s' if len(w.origin) > 1 else ''} {_rl(w.origin)}; waiting (victims): "
                       f"{_rl(w.victims) or 'none seen'}")
        else:
            out.append(f"! {name}: stuck at work #{w.stuck_seq}{op}; every rank seen entered it "
                       f"(ranks {_rl(w.victims)})")
        out.append("    wavefront (last enqueued): " +
                   "; ".join(f"#{k}: ranks {_rl(v)}" for k, v in w.wavefront.items()))
        if w.note:
            out.append(f"    {w.note}")
    return "\n".join(out) + "\n"


def to_dict(obj) -> dict:
    """JSON-ready dict of any verdict dataclass (dict keys turned to strings)."""
    fields = dataclasses.fields

    def fix(x):  # one pass, no deepcopy (dataclasses.asdict copies every leaf: seconds for 30k ranks)
        t = type(x)
        if t is str or t is int or t is bool or x is None:
            return x
        if dataclasses.is_dataclass(x):
            return {f.name: fix(getattr(x, f.name)) for f in fields(x)}
        if isinstance(x, dict):
            return {str(k): fix(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [fix(v) for v in x]
        if isinstance(x, float) and not math.isfinite(x):
            return None  # JSON has no NaN / Infinity: a bare one makes the whole document invalid
        return x
    return fix(obj)
