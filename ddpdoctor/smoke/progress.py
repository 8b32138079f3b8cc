"""Phase progress of every rank, and when a run counts as stalled. No torch here.

Each rank publishes a heartbeat record (its phase index and name, a beat counter, host, pid,
error) to the rendezvous store and to its supervisor's pipe. An observer (rank 0 reading the
store, or a supervisor reading pipes) feeds them to a `Tracker`, which measures every age with the
observer's own monotonic clock: hosts' clocks may disagree, and a stopped rank's record simply
stops changing.

A run is stalled when a rank has stayed in one phase, or sent no heartbeat, for longer than the
phase's limit (`--timeout`; `import torch` and the store connection get at least 60 s while no
rank has started). Start-up is judged by lag: once one rank has finished starting (it got past
`import torch`), a rank that has not — never seen, or still starting — is late after `--timeout`
more, however long the 60 s floor would have allowed: the others are ready and wait for it. Once any
rank reported an error or died, the limit drops to a few seconds: the survivors are then waiting
for ranks that will never arrive, and there is nothing left to wait for.
"""
from __future__ import annotations

import dataclasses
import signal
from typing import Any, Iterable, Mapping

from ddpdoctor.smoke.plan import DONE, IMPORT, START, SmokeConfig

# Phases a rank is in before it has finished starting: from "store" on it waits for the others.
NOT_STARTED = (START, IMPORT)


def heartbeat(rank: int, index: int, phase: str, beat: int, host: str, pid: int, local_rank: int | None,
              in_phase_s: float, err: str | None = None, in_collective: bool = False) -> dict[str, Any]:
    """The record a rank publishes (short keys: it is written every 0.25 s).

    `c` tells waiting inside a collective (for the other ranks) from being busy or stuck in the
    rank's own code between collectives.
    """
    return {"r": rank, "i": index, "p": phase, "b": beat, "h": host, "pid": pid, "lr": local_rank,
            "a": round(in_phase_s, 3), "e": err, "c": in_collective}


@dataclasses.dataclass
class RankState:
    rank: int
    host: str = "?"
    pid: int | None = None
    local_rank: int | None = None
    index: int = -1
    phase: str = ""
    beat: int = -1
    err: str | None = None
    exit: str | None = None  # "killed by SIGKILL", "exited with code 1": known to whoever reaped it
    proc_state: str | None = None  # "stopped", "zombie", "gone": known on the rank's own host
    in_collective: bool = False
    last_beat_at: float = 0.0
    phase_since: float = 0.0

    def to_dict(self, now: float) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "pid": self.pid, "local_rank": self.local_rank,
                "phase": self.phase, "index": self.index, "in_phase_s": round(now - self.phase_since, 2),
                "heartbeat_age_s": round(now - self.last_beat_at, 2), "error": self.err, "exit": self.exit,
                "proc_state": self.proc_state, "in_collective": self.in_collective, "seen": True}


class Tracker:
    """Ages of every rank's phase and heartbeat, by the observer's clock."""

    def __init__(self, world_size: int, cfg: SmokeConfig, now: float):
        self.world_size = world_size
        self.cfg = cfg
        self.t0 = now
        self.ranks: dict[int, RankState] = {}
        self.first_started_at: float | None = None  # when the first rank got past `import torch`

    def update(self, hb: Mapping[str, Any], now: float) -> None:
        r = int(hb["r"])
        st = self.ranks.get(r)
        if st is None:
            st = self.ranks[r] = RankState(r)
        elif hb["b"] == st.beat and hb["i"] == st.index:
            return  # the same record again: the rank did not beat since
        if hb["i"] != st.index:
            # the rank's own age of its phase: it may have entered it before we first looked
            st.phase_since = now - float(hb.get("a") or 0.0)
        st.index, st.phase, st.beat, st.last_beat_at = hb["i"], hb["p"], hb["b"], now
        st.host, st.pid, st.local_rank = hb.get("h") or st.host, hb.get("pid") or st.pid, hb.get("lr")
        st.in_collective = bool(hb.get("c"))
        if self.first_started_at is None and st.phase not in NOT_STARTED:
            self.first_started_at = now
        if hb.get("e"):
            st.err = hb["e"]

    def mark_exit(self, rank: int, desc: str, now: float) -> None:
        st = self.ranks.setdefault(rank, RankState(rank, last_beat_at=now, phase_since=now))
        st.exit = desc

    def any_trouble(self) -> bool:
        return any(s.err or s.exit for s in self.ranks.values())

    def late(self, now: float, ranks: Iterable[int] | None = None) -> list[int]:
        """Ranks (among `ranks`, default all) that are stuck, silent, dead, or never showed up."""
        trouble = self.any_trouble()
        budget = self.cfg.budget
        # how far a rank that has not started lags the first one that did: over --timeout is late
        lagging = self.first_started_at is not None and now - self.first_started_at > budget.start_lag
        out = []
        for r in (range(self.world_size) if ranks is None else ranks):
            st = self.ranks.get(r)
            if st is None:
                if lagging or now - self.t0 > budget.startup:
                    out.append(r)
                continue
            if st.phase == DONE and not st.exit:
                continue
            if st.exit and st.phase != DONE:
                out.append(r)
                continue
            if lagging and st.phase in NOT_STARTED and now - st.phase_since > budget.start_lag:
                out.append(r)
                continue
            limit = self.cfg.limit_for(st.phase)
            if trouble:
                limit = min(limit, budget.after_error)
            if now - st.last_beat_at > limit or now - st.phase_since > limit:
                out.append(r)
        return out

    def states(self, now: float) -> list[dict[str, Any]]:
        out = []
        for r in range(self.world_size):
            st = self.ranks.get(r)
            out.append(st.to_dict(now) if st else {"rank": r, "seen": False,
                                                   "waited_s": round(now - self.t0, 2)})
        return out

    def verdict(self, now: float, detected_by: str) -> dict[str, Any] | None:
        late = self.late(now)
        if not late:
            return None
        return make_verdict(self.states(now), late, self.any_trouble(), now - self.t0, detected_by, self.cfg)


def make_verdict(states: list[dict], late: list[int], trouble: bool, after_s: float, detected_by: str,
                 cfg: SmokeConfig) -> dict[str, Any]:
    """Facts for DD501: every rank's state and which ranks tripped the watchdog."""
    return {"kind": "error" if trouble else "stall", "late": sorted(late), "after_s": round(after_s, 2),
            "detected_by": detected_by, "timeout_s": cfg.timeout, "states": states}


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def process_state(pid: int | None) -> str | None:
    """'stopped' / 'zombie' / 'gone' / 'sleeping' / 'running' for a pid on this host (None if unknown)."""
    if not pid:
        return None
    try:
        import psutil
        status = psutil.Process(pid).status()
    except Exception:  # noqa: BLE001 - NoSuchProcess, AccessDenied: say what we know
        return "gone"
    return {"stopped": "stopped", "tracing-stop": "stopped", "zombie": "zombie",
            "dead": "gone", "sleeping": "sleeping", "disk-sleep": "sleeping", "idle": "sleeping"}.get(status, "running")
