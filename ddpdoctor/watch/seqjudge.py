"""Judge a hang from live collective sequence numbers (watch/seqfeed.py): pure, plain data in.

Per rank, the polls of its debug server as (t, {pg: {"enq", "done", "op"}}), t on the judge's clock (the
tick the poll arrived in: a gathered node's monotonic clock means nothing on the first node).
- moved: a group's enqueued or completed number changed between two polls: collectives are entered or
  complete. Decisive, whatever the CPU does.
- waiting: nothing changed for the whole span and a collective is enqueued but not completed (enq > done):
  the rank waits in collective done+1. For NCCL this is what tells a rank spinning in a device sync (CPU
  busy, stack in user code at `.item()`) from one computing.
- idle: nothing changed and nothing pending: the rank is outside every collective (user code, I/O, stopped).
A hang from these numbers needs a rank that never entered the collective the others wait in (its enqueued
number is below it): that rank is the origin. When every rank entered it and none completed it, a long GPU
step looks the same for a while (NCCL enqueues a bucket's all_reduce behind the backward kernels), so that
verdict waits `busy_hang_s`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

FRESH_S = 6.0   # the newest poll must be this recent to judge a rank now (polls come every 2 s)
SLACK_S = 4.0     # a change between two polls this much older than the span may still fall in it
ANNOTATE_S = 2.0  # naming the collective of a hang already judged: two polls agree
STALE_S = 60.0  # a rank that stopped answering (SIGSTOP stops its server too): its last numbers, this old at most


@dataclass(frozen=True)
class SeqState:
    kind: str                 # "moved" | "waiting" | "idle"
    pg: str | None = None     # waiting: the group and the collective it waits in
    seq: int | None = None
    op: str | None = None
    since: float = 0.0        # waiting/idle: the first poll with these numbers
    enq: dict | None = None   # pg -> last enqueued number (what the rank entered)


def clean(pgs: Any) -> dict[str, dict[str, Any]] | None:
    """An observation's "seq"["pgs"] (from another node under --gather: anyone's bytes) -> checked, or None."""
    if not isinstance(pgs, Mapping):
        return None
    out = {}
    for pg, st in list(pgs.items())[:4096]:
        if not isinstance(pg, str) or not isinstance(st, Mapping):
            continue
        enq, done = st.get("enq"), st.get("done")
        if type(enq) is not int or type(done) is not int:
            continue
        op = st.get("op")
        out[pg[:64]] = {"enq": enq, "done": done, "op": op[:64] if isinstance(op, str) else None}
    return out


def _key(pgs: Mapping[str, Mapping[str, Any]]) -> tuple:
    return tuple(sorted((pg, p["enq"], p["done"]) for pg, p in pgs.items()))


def state(polls: Iterable[tuple[float, Mapping]], now: float, span: float) -> SeqState | None:
    """What the rank's numbers did over the last `span` seconds; None when the polls do not cover it."""
    polls = list(polls)
    if not polls or polls[-1][0] < now - FRESH_S:
        return None
    t_b, b = polls[-1]
    # moved: two consecutive polls differ and the change surely fell in the span (polls come every 2 s
    # while it matters, every 30 s otherwise: a change between two polls far apart is no evidence of now)
    for (tp, p), (tq, q) in zip(polls, polls[1:]):
        if tp >= now - span - SLACK_S and _key(p) != _key(q):
            return SeqState("moved")
    old = [p for p in polls if p[0] <= now - span]
    if not old or any(_key(pgs) != _key(b) for t, pgs in polls if t >= old[-1][0]):
        return None  # not covered, or a change long enough ago to say nothing of the span
    since = t_b
    for t, pgs in reversed(polls):
        if _key(pgs) != _key(b):
            break
        since = t
    enq = {pg: p["enq"] for pg, p in b.items()}
    pending = sorted((pg, p) for pg, p in b.items() if p["enq"] > p["done"])
    if not pending:
        return SeqState("idle", since=since, enq=enq)
    pg, p = pending[0]
    return SeqState("waiting", pg, p["done"] + 1, p.get("op"), since, enq)


@dataclass(frozen=True)
class SeqHang:
    pg: str
    seq: int
    op: str | None
    waiting: list            # the tracks waiting in it
    origin: list             # the tracks that never entered it ([] = every rank entered it)
    stalled_s: float


def verdict(tracks: list, now: float, span: float) -> SeqHang | None:
    """The hang the numbers show, or None (no opinion: someone moved, or a rank's numbers are missing).
    `tracks` have .rank and .seqs (polls); a rank with no fresh polls (stopped: its server thread is stopped
    too) is judged by the last numbers it gave."""
    states, last_enq = {}, {}
    for t in tracks:
        st = state(t.seqs, now, span)
        if st is not None and st.kind == "moved":
            return None
        states[id(t)] = st
        if st is not None:
            last_enq[id(t)] = st.enq or {}
        elif t.seqs and t.seqs[-1][0] >= now - STALE_S:
            last_enq[id(t)] = {pg: p["enq"] for pg, p in t.seqs[-1][1].items()}
    waiting = [t for t in tracks if states[id(t)] is not None and states[id(t)].kind == "waiting"]
    if not waiting:
        return None
    by_pg: dict[str, list] = {}
    for t in waiting:
        by_pg.setdefault(states[id(t)].pg, []).append(t)
    pg = max(by_pg, key=lambda k: (len(by_pg[k]), k == "0"))
    ws = by_pg[pg]
    seq = min(states[id(t)].seq for t in ws)
    op = next((states[id(t)].op for t in ws if states[id(t)].op and states[id(t)].seq == seq), None)
    if any(id(t) not in last_enq or pg not in last_enq[id(t)] for t in tracks if t not in ws):
        return None  # a rank's numbers for this group are unknown: nothing says it did not enter
    origin = [t for t in tracks if t not in ws and last_enq[id(t)][pg] < seq]
    others = [t for t in tracks if t not in ws and t not in origin]
    if others and any(states[id(t)] is None or states[id(t)].kind != "idle" for t in others):
        return None
    stalled = now - max(states[id(t)].since for t in ws)
    return SeqHang(pg, seq, op, ws, origin, stalled)


def describe(h: SeqHang) -> str:
    what = f"collective #{h.seq}" + (f" {h.op}" if h.op else "") + f" of pg {h.pg}"
    if h.origin:
        return f"never entered {what} (debug server)"
    return (f"every rank entered {what} and none completed it for {h.stalled_s:.0f} s (debug server): "
            "a lost message, a network fault, or a GPU kernel that never finished")


def fields(h: SeqHang) -> dict[str, Any]:
    """The event fields frfeed's flight-recorder events carry too (explain reads them)."""
    return {"source": "debug server", "seq": h.seq, "collective": h.op, "pg": h.pg,
            "waiting": {"ranks": sorted(t.rank for t in h.waiting), "call": h.op or "a collective",
                        "at": f"#{h.seq} of pg {h.pg}"}}


def moved_recently(tracks: list, now: float, span: float) -> bool:
    return any((st := state(t.seqs, now, span)) is not None and st.kind == "moved" for t in tracks)


def _doing(t) -> str:
    """What the origin does, from watch's own look at it (its /proc state, its latest stack)."""
    tick = t.last_tick()
    w = t.latest_where() or {}
    if tick and tick[4] in "Tt":
        return "stopped (state T: SIGSTOP or a debugger)"
    if tick and tick[4] == "D":
        return "in I/O (state D)"
    if w.get("kind") == "dataloader":
        return "in a DataLoader: its main thread waits for a batch"
    if w.get("kind") in ("collective", "ddp", "distributed"):
        return f"in another collective ({w.get('call') or '?'})"
    return "in user code" if w else ""


def judge(j, now: float, alive: list, still: Mapping[int, bool]) -> list | None:
    """watch/judge.py's hook: events when the numbers decide (a hang, or the end of one they opened); None
    when they have no opinion and the judgement from stacks and /proc goes on."""
    if not any(t.seqs for t in alive):
        return None
    if j.hang is not None:
        if j.hang.get("source") != "debug server":
            return None
        if not moved_recently(alive, now, 4.0):
            return []
        ev = j._event("recovered", alive, now, detail=f"after a hang of {now - j.hang['_t']:.0f} s")
        j.hang = None
        return [ev]
    if any(t.gone for t in j.ranks.values()):
        return None  # a rank that died: the judgement from /proc names it with its exit status
    h = verdict(alive, now, j.hang_s)
    if h is None:
        return None
    if h.origin:
        busy = [t for t in h.origin if not still[id(t)] and not (t.last_tick() and t.last_tick()[4] in "Tt")]
        if busy and h.stalled_s < j.busy_hang_s:
            return None  # it computes while the others wait: a long step until busy_hang_s says otherwise
        doing = _doing(h.origin[0]) if len(h.origin) == 1 else ""
        detail = describe(h) + (f": {doing}" if doing else "")
    elif h.stalled_s < j.busy_hang_s:
        return None  # every rank entered it: a long GPU step looks the same for a while
    else:
        detail = describe(h)
    ev = j._event("hang", h.origin, now, detail=detail, **fields(h))
    j.hang = {"_t": now, **ev}
    return [ev]


def annotate(ev: dict, tracks: Iterable, now: float) -> None:
    """A hang named from stacks and /proc (it may come a poll or two before the numbers cover hang_s): add
    the collective's number when the waiting ranks' numbers agree that they wait in it, and say so of the
    origin ranks whose numbers show they never entered it."""
    if ev.get("source"):
        return
    tracks = list(tracks)
    want = set((ev.get("waiting") or {}).get("ranks") or ())
    states = [st for t in tracks if t.rank in want and (st := state(t.seqs, now, ANNOTATE_S)) is not None]
    keys = {(st.pg, st.seq) for st in states if st.kind == "waiting"}
    if not want or len(keys) != 1 or len(states) != len(want):
        return
    pg, seq = keys.pop()
    op = next((st.op for st in states if st.op), None)
    origin = [t for t in tracks if t.rank in set(ev.get("ranks") or ())]
    enq = [t.seqs[-1][1].get(pg, {}).get("enq") if t.seqs else None for t in origin]
    never = bool(origin) and all(type(e) is int and e < seq for e in enq)
    h = SeqHang(pg, seq, op, [t for t in tracks if t.rank in want], origin if never else [], 0.0)
    if never:
        ev["detail"] = f"{describe(h)}: {ev['detail']}"
    ev.update(fields(h))
