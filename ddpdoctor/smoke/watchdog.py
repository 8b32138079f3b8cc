"""The smoke worker's store monitor (its own thread): publishes this rank's heartbeat into the
rendezvous store; rank 0's also reads every rank's heartbeat and, when the run stalls, reports what
every rank was doing and tells every rank to stop (key `abort`)."""
from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from ddpdoctor.smoke import plan as P
from ddpdoctor.smoke.collectives import short_error
from ddpdoctor.smoke.progress import Tracker, process_state

if TYPE_CHECKING:
    from ddpdoctor.smoke.worker import Worker

BEAT_S = 0.25


def monitor_loop(w: Worker) -> None:
    mon = w.mon
    tracker = Tracker(w.world, w.cfg, time.monotonic()) if w.rank == 0 else None
    known: set[int] = set()
    last_pub = last_poll = 0.0
    last_index = -1
    failing_since = None
    poll_s = max(BEAT_S, w.world / 400)  # rank 0 reads every heartbeat: keep the store's load bounded
    while True:
        now = time.monotonic()
        try:
            if w.index != last_index or now - last_pub >= 0.9 * BEAT_S:
                idx = w.index
                mon.set(f"hb/{w.rank}", json.dumps(w.hb()))
                w.published, last_index, last_pub = idx, idx, now
            if now - last_poll >= 0.9 * poll_s:
                last_poll = now
                if tracker is None:
                    if mon.check(["abort"]):
                        _aborted(w, json.loads(mon.get("abort")))
                else:
                    _poll_world(w, tracker, known, now)
                    w.chan.send({"t": "progress", "states": tracker.states(time.monotonic())})
            failing_since = None
        except Exception as e:  # noqa: BLE001 - the store host froze or died
            failing_since = failing_since or now
            if now - failing_since > w.cfg.budget.lost_store:
                w.chan.send({"t": "lost_store", "error": short_error(e), "for_s": round(now - failing_since, 1)})
                os._exit(1)
        # sleep until the next beat or phase change: a thread that woke more often would
        # compete with the collectives for two cores and the interpreter lock (bandwidth)
        w.kick_store.wait(BEAT_S)
        w.kick_store.clear()


def _poll_world(w: Worker, tracker: Tracker, known: set[int], now: float) -> None:
    mon = w.mon
    tracker.update(w.hb(), now)
    for r in range(1, w.world):
        if r not in known and mon.check([f"hb/{r}"]):
            known.add(r)
    if known:
        keys = [f"hb/{r}" for r in sorted(known)]
        values = mon.multi_get(keys) if hasattr(mon, "multi_get") else [mon.get(k) for k in keys]
        for v in values:
            tracker.update(json.loads(v), now)
    for st in tracker.ranks.values():
        # a silent rank on this host whose process is gone died: no need to wait out its limit
        if st.host == w.host and not st.exit and now - st.last_beat_at > 1.0 and st.phase != P.DONE:
            if process_state(st.pid) in ("gone", "zombie"):
                tracker.mark_exit(st.rank, "exited (its process is gone)", now)
    verdict = tracker.verdict(time.monotonic(), "rank 0's watchdog")
    if verdict:
        for st in verdict["states"]:
            if st.get("seen") and st.get("host") == w.host and st["rank"] != w.rank:
                st["proc_state"] = process_state(st.get("pid"))
        _finish_with_verdict(w, verdict)


def _aborted(w: Worker, verdict: dict) -> None:
    w.chan.send({"t": "aborted", "kind": verdict.get("kind"), "late": verdict.get("late")})
    try:
        w.mon.add("abort_ack", 1)
    finally:
        os._exit(1)


def _finish_with_verdict(w: Worker, verdict: dict) -> None:
    """Rank 0's watchdog fired: report what every rank was doing, stop every rank, exit 1."""
    with w.finish_lock:
        if w.finished:
            return
        w.finished = True
    records = {str(w.rank): _record_copy(w)}
    try:
        for r in range(1, w.world):
            if w.mon.check([f"rec/{r}"]):
                records[str(r)] = json.loads(w.mon.get(f"rec/{r}"))
    except Exception:  # noqa: BLE001 - report what we have
        pass
    w.chan.send({"t": "world", "world": w.world_report(records, verdict)})
    alive = [s for s in verdict["states"] if s.get("seen") and s["rank"] != w.rank and not s.get("exit")
             and s.get("heartbeat_age_s", 99) < 2.0]
    try:
        w.mon.set("abort", json.dumps({"kind": verdict["kind"], "late": verdict["late"]}))
        deadline = time.monotonic() + 1.0  # let the others read it before the store goes away with us
        while time.monotonic() < deadline and int(w.mon.add("abort_ack", 0)) < len(alive):
            time.sleep(0.05)
    except Exception:  # noqa: BLE001
        pass
    os._exit(1)


def _record_copy(w: Worker) -> dict[str, Any]:
    for _ in range(5):  # the main thread may be appending to it
        try:
            return json.loads(json.dumps(w.record, default=str))
        except RuntimeError:
            time.sleep(0.01)
    return {"rank": w.rank, "host": w.host, "pid": w.pid}
