"""Read the events `ddpdoctor watch` appended to an armed directory (watch-events.jsonl), for `explain`.

The file is written by watch/loop.py (one JSON object per line, render/watch.py's `to_json`), but
`explain` reads it after the job died, from a folder anyone may have written to: it is hostile input.
So: only its last MAX_BYTES are read (ddpdoctor/readfile.py: never a FIFO, a device, a wait), a line
longer than MAX_LINE, that is not JSON, nests too deep, or lacks a known kind and a valid time is
skipped and counted; every field is checked for its type and cut to a length, so what comes out is
plain data of a known shape (json.loads only: nothing read can run code).

Several watches may append to one file (a watch restarted beside the job): each ends with its
`summary` line; the events after the last summary but one are the last watch's.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.readfile import read_tail

EVENTS_FILE = "watch-events.jsonl"  # the name watch/loop.py writes (loop.EVENTS_FILE)
MAX_BYTES = 8 << 20     # ≈ 20 000 events: far more than any watch writes (a handful per incident)
MAX_LINE = 1 << 20      # a summary of a 100 000-rank job is ≈ 600 kB
MAX_EVENTS = 10_000
MAX_LIST = 4096         # ranks / hosts / where entries kept per event
MAX_STR = 300
KINDS = ("hang", "straggler", "recovered", "rank_gone", "summary")


@dataclass
class WatchEvents:
    path: str
    events: list[dict[str, Any]]            # the last watch's events, oldest first
    skipped: int = 0                        # lines that were not a valid event
    earlier: int = 0                        # events of earlier watches in the same file, not shown
    cut: int = 0                            # bytes before the part read (the file is larger than MAX_BYTES)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.path, "events": self.events, "skipped_lines": self.skipped,
                "earlier_events": self.earlier, "bytes_not_read": self.cut, "notes": self.notes}


class BadEvents(ValueError):
    """The events file cannot be read at all: one line for the user."""


def beside(path: str) -> str | None:
    """The events file in the folder of `path` (an armed job folder, or a log that sits in one)."""
    d = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    cand = os.path.join(d, EVENTS_FILE)
    return cand if os.path.isfile(cand) else None


def load(path: str) -> WatchEvents:
    try:
        data, size = read_tail(path, MAX_BYTES)
    except OSError as e:
        raise BadEvents(f"cannot read watch events {path!r}: {e.strerror or e}") from None
    cut = max(0, size - MAX_BYTES)
    lines = data.split(b"\n")
    if cut:
        lines = lines[1:]  # the first line is cut in the middle
    if lines and not lines[-1]:
        lines.pop()
    events: list[dict[str, Any]] = []
    skipped = 0
    for raw in lines:
        e = parse_line(raw)
        if e is None:
            skipped += raw.strip() != b""
        else:
            events.append(e)
    # the last watch: after the last summary that is not the final line
    starts = [i + 1 for i, e in enumerate(events[:-1]) if e["kind"] == "summary"]
    start = starts[-1] if starts else 0
    mine = events[start:]
    earlier = start
    if len(mine) > MAX_EVENTS:
        earlier += len(mine) - MAX_EVENTS
        mine = mine[-MAX_EVENTS:]
    notes = []
    if cut:
        notes.append(f"read the last {MAX_BYTES >> 20} MiB of {size / (1 << 20):.0f} MiB")
    if earlier:
        notes.append(f"{earlier} event(s) of earlier watches in this file not shown")
    if skipped:
        notes.append(f"{skipped} line(s) skipped: not a watch event")
    return WatchEvents(path, mine, skipped, earlier, cut, notes)


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One line as a checked event, or None."""
    if len(raw) > MAX_LINE or not raw.strip():
        return None
    try:
        obj = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):  # not JSON, too deep, an int of 5000 digits
        return None
    if not isinstance(obj, dict) or obj.get("kind") not in KINDS:
        return None
    wall = _time(obj.get("time"))
    if wall is None:
        return None
    e: dict[str, Any] = {"kind": obj["kind"], "time": obj["time"][:40], "wall": wall,
                         "ranks": _ints(obj.get("ranks")), "hosts": _strs(obj.get("hosts")),
                         "where": _where(obj.get("where")), "detail": _str(obj.get("detail"))}
    w = obj.get("waiting")
    if isinstance(w, dict):
        e["waiting"] = {"ranks": _ints(w.get("ranks")), "call": _str(w.get("call")) or None, "at": _str(w.get("at"))}
    for k in ("origin_ranks",):
        if k in obj:
            e[k] = _ints(obj[k])
    for k in ("extra_where", "cause", "source", "collective", "pg", "end"):
        if isinstance(obj.get(k), str):
            e[k] = _str(obj[k])
    for k in ("worker_pid", "seq", "exit_status"):
        if _int(obj.get(k)) is not None:
            e[k] = obj[k]
    for k in ("ratio", "others_wait", "watched_s"):
        if _num(obj.get(k)) is not None:
            e[k] = obj[k]
    for k in ("events", "exits"):
        if isinstance(obj.get(k), dict):
            e[k] = {_str(a): b for a, b in list(obj[k].items())[:64] if _int(b) is not None}
    if isinstance(obj.get("open"), list):
        e["open"] = _strs(obj["open"])
    return e


def _time(v) -> float | None:
    if not isinstance(v, str) or len(v) > 40:
        return None
    try:
        t = _dt.datetime.fromisoformat(v)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    try:
        return t.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


def _int(v) -> int | None:
    return v if type(v) is int and -(1 << 62) < v < 1 << 62 else None


def _num(v) -> float | None:
    return v if type(v) in (int, float) and v == v and abs(v) < 1e15 else None


def _str(v) -> str:
    return v[:MAX_STR] if isinstance(v, str) else ""


def _ints(v) -> list[int]:
    return [x for x in v[:MAX_LIST] if _int(x) is not None] if isinstance(v, list) else []


def _strs(v) -> list[str]:
    return [x[:MAX_STR] for x in v[:MAX_LIST] if isinstance(x, str)] if isinstance(v, list) else []


def _where(v) -> list[dict[str, Any]]:
    out = []
    for x in v[:MAX_LIST] if isinstance(v, list) else ():
        if not isinstance(x, dict) or _int(x.get("rank")) is None:
            continue
        w = x.get("where") if isinstance(x.get("where"), dict) else {}
        out.append({"rank": x["rank"], "host": _str(x.get("host")) or "?", "pid": _int(x.get("pid")) or 0,
                    "where": {k: w[k][:MAX_STR] if k != "line" else w[k] for k in ("kind", "call", "file", "line", "func")
                              if isinstance(w.get(k), str if k != "line" else int) and (k != "line" or _int(w[k]))}})
    return out


def for_explain(explicit: str | None, near: str | None, **facts) -> tuple[dict[str, Any], str] | None:
    """`explain`'s watch section: the events file given (--watch-events), else the one beside `near` (the
    --fr folder, the first --log); compared with the verdict facts (watchagree.compare's keywords).
    (JSON object, text) or None when there is no events file."""
    path = explicit or (beside(near) if near and near != "-" else None)
    if path is None:
        return None
    from ddpdoctor.logscan.watchagree import compare
    from ddpdoctor.render.watchevents import text
    we = load(path)
    comps = compare(we.events, **facts)
    return {**we.to_dict(), "agreement": comps}, text(we, comps)
