"""`watch`'s events as one line of text or one JSON object each; no judgement (watch/judge.py decides).

JSON (one object per line, `--json`): kind (hang | straggler | recovered | rank_gone | summary), ranks,
hosts, where ([{rank, host, pid, where: {kind, call, file, line, func}}]), detail, time (UTC, ISO 8601),
and the kind's own fields (hang: waiting {ranks, call, at}; straggler: ratio, extra_where, cause).
"""
from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Mapping


def _when(wall: float) -> str:
    return _dt.datetime.fromtimestamp(wall, _dt.timezone.utc).strftime("%H:%M:%S")


def _loc(w: Mapping[str, Any]) -> str:
    if not w:
        return "?"
    call = w.get("call")
    if w.get("kind") in ("collective", "distributed", "init") and call:
        return f"{call} at {w.get('file')}:{w.get('line')}"
    return f"{w.get('func') or '?'} at {w.get('file')}:{w.get('line')}"


def _who(e: Mapping[str, Any]) -> str:
    parts = []
    for x in e["where"]:
        parts.append(f"rank {x['rank']} on {x['host']} (pid {x['pid']})")
    if not parts and e.get("origin_ranks"):
        rs = e["origin_ranks"]
        parts.append(("rank " if len(rs) == 1 else "ranks ") + ",".join(map(str, rs)))
    return ", ".join(parts)


def _ranks(rs) -> str:
    rs = list(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ",".join(map(str, rs))


def line(e: Mapping[str, Any]) -> str:
    k = e["kind"]
    ts = _when(e["wall"])
    if k == "hang":
        if e.get("confidence") == "low":   # the judge could not tell which (every rank waits on its GPU)
            ts += " (low confidence)"
        w = e.get("waiting") or {}
        rs = w.get("ranks", [])
        waits = (f"{_ranks(rs)} {'waits' if len(rs) == 1 else 'wait'} in {w.get('call')} at {w.get('at')}" if rs
                 else "no rank can move")  # every rank stopped: nobody waits in a collective
        if not e["where"]:
            return f"{ts} hang: {waits}; origin {e['detail']}"
        at = "; ".join(_loc(x["where"]) for x in e["where"]) if e["where"][0]["where"] else ""
        return f"{ts} hang: {_who(e)} {e['detail']}" + (f", at {at}" if at and "gone" not in e["detail"] else "") \
            + f"; {waits}"
    if k == "straggler":
        out = f"{ts} straggler: {_who(e)}: {e['detail']}"
        if e.get("extra_where"):
            out += f", extra time in {e['extra_where']}"
        if e.get("cause"):
            out += f"; {e['cause']}"
        return out
    if k == "recovered":
        return f"{ts} recovered: {_ranks(e['ranks'])} {e['detail']}"
    if k == "rank_gone":
        return f"{ts} rank gone: {_who(e)}: {e['detail']}"
    if k == "summary":
        ev = e.get("events") or {}
        told = ", ".join(f"{n} {kind}" for kind, n in ev.items()) or "no events"
        still = f"; still open: {', '.join(e['open'])}" if e.get("open") else ""
        ex = e.get("exits") or {}
        if ex:
            still += "; ranks ended: " + ", ".join(f"{n}× {how}" for how, n in ex.items())
        return (f"{ts} summary: watched {_ranks(e['ranks'])} on {', '.join(e['hosts']) or '?'} for "
                f"{e.get('watched_s', 0):.0f} s ({e.get('end', 'ended')}): {told}{still}")
    return f"{ts} {k}: {e.get('detail', '')}"


def to_json(e: Mapping[str, Any]) -> str:
    out = {k: v for k, v in e.items() if not k.startswith("_") and k not in ("wall", "t")}
    out["time"] = _dt.datetime.fromtimestamp(e["wall"], _dt.timezone.utc).isoformat(timespec="seconds")
    return json.dumps(out, sort_keys=False)
