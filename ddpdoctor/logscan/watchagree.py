"""Do watch's events agree with what the log or the flight recorder says after the job died?

Each side names ranks with a meaning; only like is compared with like:
- a hang's origin (watch: the rank(s) of the hang still open when it stopped watching) against the ranks
  the flight recorder says never entered the collective the others wait in (flightrec/divergence.py), and
  against the NCCL watchdog lines' origin (flightrec/watchdog.py: last enqueued < the stuck work id);
- the first rank to die (watch's first `rank_gone`) against torchrun's "Root Cause (first observed
  failure)", else the rank of the log's top cause when that cause is a crash, not a hang;
- that there was a hang at all: the log's top cause is a collective timeout / hang, and watch, which
  watched until the job ended, saw one or not.
A victim's watchdog timeout names the rank that reported it, not the origin: it is never compared with
watch's origin. Where the other side names nothing comparable, nothing is said (never a guess).
"""
from __future__ import annotations

from typing import Any

# failure modes (ddpdoctor/catalog) whose sign in a log is ranks waiting for one that never came:
# watch calls these "hang" (tests/test_explain_watch_events.py keeps the ids in the catalog)
HANG_IDS = frozenset({"NCCL_COLLECTIVE_TIMEOUT", "GLOO_COLLECTIVE_TIMEOUT", "UNEVEN_INPUTS_HANG",
                      "COLLECTIVE_MISMATCH_ACROSS_RANKS", "NCCL_P2P_ACS_IOMMU_HANG"})


def _rl(rs) -> str:
    rs = sorted(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ",".join(map(str, rs))


def _hhmmss(e) -> str:
    return e["time"][11:19] if len(e["time"]) >= 19 else e["time"]


def open_hang(events: list[dict]) -> dict | None:
    """The hang still open at the end of the watch (a `recovered` while a hang is open closes it:
    watch/judge.py judges no straggler while a hang is open, so that `recovered` is the hang's)."""
    hang = None
    for e in events:
        if e["kind"] == "hang":
            hang = e
        elif e["kind"] == "recovered" and hang is not None:
            hang = None
    return hang


def origin(e: dict) -> set[int]:
    return set(e.get("ranks") or e.get("origin_ranks") or ())


def first_gone(events: list[dict]) -> dict | None:
    return next((e for e in events if e["kind"] == "rank_gone" and e["ranks"]), None)


def watched_to_end(events: list[dict]) -> bool:
    return bool(events) and events[-1]["kind"] == "summary" and events[-1].get("end") == "job ended"


def _by_ranks(mine: set[int], theirs: set[int]) -> str:
    return "agrees" if mine == theirs else "partly" if mine & theirs else "disagrees"


def compare(events: list[dict], *, fr=None, watchdog=None, first_failure: dict | None = None,
            diagnoses=()) -> list[dict[str, Any]]:
    """[{with, verdict (agrees | partly | disagrees), text}] — empty when nothing is comparable."""
    out: list[dict[str, Any]] = []
    hang = open_hang(events)
    seq = f" (#{hang['seq']} {hang.get('collective') or ''}".rstrip() + ")" if hang and "seq" in hang else ""
    said = f"watch named {_rl(origin(hang))} at {_hhmmss(hang)}{seq}" if hang and origin(hang) else ""
    g = fr.first if fr is not None else None
    if g is not None and g.status in ("diverged", "mismatch"):
        culprit = set(g.not_entered) or (set(g.variants[-1].ranks) if len(g.variants) > 1 else set())
        theirs = f"{_rl(culprit)} never entered collective #{g.seq} {g.op}"
        if culprit and said:
            out.append({"with": "flight recorder", "verdict": _by_ranks(origin(hang), culprit),
                        "text": f"{theirs}; {said}", "ranks": sorted(culprit), "watch_ranks": sorted(origin(hang))})
        elif culprit and watched_to_end(events):
            out.append({"with": "flight recorder", "verdict": "disagrees",
                        "text": f"{theirs}; watch, which watched until the job ended, named no open hang"})
    w = next((x for x in (watchdog.groups if watchdog is not None else ()) if x.origin and x.pg == "0"), None)
    if w is not None and said:
        out.append({"with": "NCCL watchdog lines", "verdict": _by_ranks(origin(hang), set(w.origin)),
                    "text": f"{_rl(w.origin)} never entered work #{w.stuck_seq}"
                            f"{' ' + w.op if w.op else ''}; {said}",
                    "ranks": sorted(w.origin), "watch_ranks": sorted(origin(hang))})
    gone = first_gone(events)
    top = diagnoses[0] if diagnoses else None
    crash_rank = None
    if first_failure and first_failure.get("rank") is not None:
        crash_rank, whose = first_failure["rank"], "torchrun's first observed failure"
        if first_failure.get("exitcode") is not None:
            whose += f" (exitcode {first_failure['exitcode']})"
    elif top is not None and top.failure.id not in HANG_IDS and (top.origin or {}).get("rank") is not None:
        crash_rank, whose = top.origin["rank"], f"the log's top cause {top.failure.id}"
    if crash_rank is not None and gone is not None:
        out.append({"with": "first failure", "verdict": "agrees" if crash_rank in gone["ranks"] else "disagrees",
                    "text": f"{whose}: rank {crash_rank}; watch saw {_rl(gone['ranks'])} go first at "
                            f"{_hhmmss(gone)} ({gone['detail'] or 'exit status unknown'})",
                    "ranks": [crash_rank], "watch_ranks": gone["ranks"]})
    if top is not None and top.failure.id in HANG_IDS:
        any_hang = next((e for e in events if e["kind"] == "hang"), None)
        if any_hang is not None:
            out.append({"with": "log's top cause", "verdict": "agrees",
                        "text": f"the log's top cause {top.failure.id} is a hang; watch saw one at {_hhmmss(any_hang)}"
                                + (f", origin {_rl(origin(any_hang))}" if origin(any_hang) else "")})
        elif watched_to_end(events):
            out.append({"with": "log's top cause", "verdict": "disagrees",
                        "text": f"the log's top cause {top.failure.id} is a hang; watch, which watched until the "
                                "job ended, saw none"})
    return out
