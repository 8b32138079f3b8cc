"""Judge a running job from what watch/sample.py reads: hang, straggler, recovered, rank gone.

Only plain data in (one observation per rank per tick, as dicts, so a gathered node's view is judged
the same way as a local one), events out. Nothing here reads the world.

Progress is judged by things that move, never by two stacks that look alike (a job looping on small
all_reduces lands every sample in the same collective while it runs at full speed):
- the main thread's busy time (schedstat on-CPU + runnable) grows: it computes or is throttled;
- the process's I/O bytes grow (Gloo's threads move a large collective's data while the main thread waits);
- the main thread's stack changes between samples.
A rank is *waiting* when none of these moved for HANG_S and its stack is in a collective; the job hangs
when at least one rank waits and no rank moves; the *origin* is the rank that is not waiting like the
others: gone, stopped, in user code or I/O, in a DataLoader, in a different collective.

A straggler (the rank the others wait for, or a node whose network holds them back): watch/straggler.py.
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ddpdoctor.watch import seqjudge
from ddpdoctor.watch.straggler import (STRAGGLER_LAG, STRAGGLER_PERSIST_S, STRAGGLER_WINDOW_S,  # noqa: F401
                                       StragglerJudge)

HANG_S = 6.0              # nothing moved for this long: a rank waits / the job hangs
BUSY_HANG_S = 120.0       # others wait this long while one rank computes: a hang with a busy origin
MOVE_BUSY_SHARE = 0.02    # main-thread busy time over HANG_S that counts as moving (a Gloo wait adds 0)
MOVE_IO_BYTES = 64 << 10  # I/O over HANG_S that counts as moving (store polls are a few hundred bytes)
ALL_GPU_S = 8.0           # every rank waits on its GPU this long (driver-only samples): the low-confidence verdict
WAIT_KINDS = ("collective", "ddp", "backward", "distributed")


def where_text(w: Mapping[str, Any] | None) -> str:
    if not w:
        return "?"
    return f"{w.get('func') or '?'} {w.get('file') or '?'}:{w.get('line') or 0}"


@dataclass
class RankTrack:
    rank: int
    host: str
    pid: int
    world_size: int | None = None
    ticks: deque = field(default_factory=lambda: deque(maxlen=400))   # (t, busy_ns, delay_ns, io, state)
    stacks: deque = field(default_factory=lambda: deque(maxlen=60))   # (t, where, sig, active, inner)
    chunks: deque = field(default_factory=lambda: deque(maxlen=30))   # (t, samples, waiting, {line: n}, in backward)
    workers: dict = field(default_factory=dict)                        # pid -> RankTrack of a child
    tcp: dict = field(default_factory=dict)                            # watch/netstuck.py, latest
    gpu: dict | None = None            # watch/gpuwait.py: its main thread waits on its GPU (latest tick)
    core: dict | None = None           # watch/corescan.py: its CPU and who else ran there (latest scan)
    seqs: deque = field(default_factory=lambda: deque(maxlen=60))     # (t, {pg: numbers}): watch/seqjudge.py
    gone: bool = False
    exit: int | None = None
    exit_text: str = ""

    def last_tick(self):
        return self.ticks[-1] if self.ticks else None

    def since(self, t0: float):
        return [x for x in self.ticks if x[0] >= t0]

    def moved(self, now: float, span: float) -> bool:
        """Anything that moves moved during the last `span` seconds (needs ticks covering it)."""
        old = [x for x in self.ticks if x[0] <= now - span]
        if not old:
            return True  # too new to say: assume it moves
        seq = seqjudge.state(self.seqs, now, span) if self.seqs else None
        if seq is not None and seq.kind == "moved":
            return True  # its collectives complete: decisive
        a, b = old[-1], self.ticks[-1]
        dt = max(b[0] - a[0], 1e-3)
        # waiting in an enqueued collective that does not complete: busy CPU is a spin (NCCL's device sync)
        busy = (b[1] - a[1]) / 1e9 / dt >= MOVE_BUSY_SHARE and not (seq is not None and seq.kind == "waiting")
        if busy or b[3] - a[3] >= MOVE_IO_BYTES:
            return True
        sigs = {s[2] for s in self.stacks if s[0] >= a[0] - 0.5}
        return len(sigs) > 1

    def latest_where(self):
        return self.stacks[-1][1] if self.stacks else None

    def stack_covers(self, now: float, span: float) -> bool:
        """Stack samples at both ends of the span: 'same stack throughout' is backed by samples."""
        ts = [s[0] for s in self.stacks]
        return len(ts) >= 2 and min(ts) <= now - span + 1.5 and max(ts) >= now - 2.5


def _stopped(t: "RankTrack") -> bool:
    tick = t.last_tick()
    return bool(tick) and tick[4] in "Tt"


def _wait_kind(w: Mapping[str, Any] | None) -> bool:
    return bool(w) and w.get("kind") in WAIT_KINDS


class Judge(StragglerJudge):
    def __init__(self, *, hang_s: float = HANG_S, busy_hang_s: float = BUSY_HANG_S,
                 strag_lag: float = STRAGGLER_LAG, strag_persist: float = STRAGGLER_PERSIST_S,
                 strag_window: float = STRAGGLER_WINDOW_S):
        self.ranks: dict[tuple[str, int], RankTrack] = {}
        self.hang_s = hang_s
        self.busy_hang_s = busy_hang_s
        self.hang: dict[str, Any] | None = None       # the open hang event
        self._init_straggler(strag_lag, strag_persist, strag_window)
        self.counts: Counter = Counter()
        self.exits: Counter = Counter()   # how the ranks that are gone ended
        self.first_t: float | None = None

    # ------------------------------------------------------------------ input
    def feed(self, obs: Iterable[Mapping[str, Any]], now: float) -> list[dict[str, Any]]:
        """One tick's observations (dicts from watch/loop.py:observe) -> new events."""
        if self.first_t is None:
            self.first_t = now
        events = []
        # who died first comes first: torchrun stops the other ranks when one dies
        obs = sorted(obs, key=lambda o: o.get("exit_t") or 0.0)
        for o in obs:
            key = (o["host"], o["pid"])
            tr = self.ranks.get(key)
            if tr is None:
                tr = self.ranks[key] = RankTrack(o["rank"], o["host"], o["pid"], o.get("world_size"))
            self._update(tr, o, now)
            if "workers" in o:  # the rank's current workers only: a DataLoader starts new ones every epoch
                tr.workers = {w["pid"]: tr.workers.get(w["pid"]) or RankTrack(o["rank"], o["host"], w["pid"])
                              for w in o["workers"]}
                for w in o["workers"]:
                    self._update(tr.workers[w["pid"]], w, now)
            if tr.gone and not tr.exit_text:
                tr.exit_text = o.get("exit_text") or "exit status unknown"
                self.exits[tr.exit_text] += 1
                if o.get("exit") == 0:
                    continue  # a rank that finished: the summary counts it, it is no event
                events.append(self._event("rank_gone", [tr], now, detail=tr.exit_text,
                                          exit_status=o.get("exit")))
        events += self._judge_hang(now)
        if self.hang is None:
            events += self._judge_straggler(now)
        for e in events:
            self.counts[e["kind"]] += 1
        return events

    def _update(self, tr: RankTrack, o: Mapping[str, Any], now: float) -> None:
        if o.get("state") in ("gone", "Z", "X"):
            tr.gone = True
            tr.exit = o.get("exit")
            return
        tr.gpu = o.get("gpu") if isinstance(o.get("gpu"), dict) else None
        if isinstance(o.get("core"), dict):
            tr.core = o["core"]
        tr.ticks.append((now, o["run_ns"] + o["delay_ns"], o["delay_ns"], o["io"], o["state"],
                         o.get("throttled_ns", 0), o.get("cgroup", "")))
        if isinstance(o.get("tcp"), dict):
            tr.tcp = o["tcp"]
        if isinstance(o.get("qdisc"), dict):
            self._note_qdisc(tr.host, o["qdisc"], now)
        rec = o.get("rec")
        if rec and rec.get("n"):
            tr.chunks.append((now, rec["n"], rec["wait"], rec.get("lines") or {}, rec.get("bwd")))
        seq = o.get("seq")
        if isinstance(seq, dict) and (pgs := seqjudge.clean(seq.get("pgs"))) is not None:
            tr.seqs.append((now, pgs))
        st = o.get("stack")
        if st and st.get("ok"):
            tr.stacks.append((now, st["where"], st["sig"], st["active"], st.get("inner") or st["where"]))

    def alive(self) -> list[RankTrack]:
        return [t for t in self.ranks.values() if not t.gone]

    def wants_stacks(self, now: float) -> bool:
        """Sample stacks now (not on the slow schedule): a rank's main thread stopped moving."""
        return any(not t.moved(now, 2.0) for t in self.alive())

    # ------------------------------------------------------------------ hang
    def _judge_hang(self, now: float) -> list[dict[str, Any]]:
        alive = self.alive()
        if not alive:
            return []
        gpu = _gpu_waits(alive)   # they spin at one line: their busy time is no progress
        still = {id(t): t in gpu or not t.moved(now, self.hang_s) for t in alive}
        waiting = [t for t in alive if t in gpu or (still[id(t)] and _wait_kind(t.latest_where())
                                                   and t.stack_covers(now, self.hang_s))]
        gone = [t for t in self.ranks.values() if t.gone]
        # Every rank stopped (state T) and still: nobody waits in a collective, yet nothing can move.
        # The only way a one-rank job hangs visibly from outside (SIGSTOP, a debugger); seen on a GPU job.
        all_stopped = all(still[id(t)] and _stopped(t) for t in alive)
        seq = seqjudge.judge(self, now, alive, still)  # the debug server's numbers, when the job has them
        if seq is not None:
            return seq
        if self.hang is not None:
            if not waiting and not all_stopped:
                ev = self._event("recovered", alive, now, detail=f"after a hang of {now - self.hang['_t']:.0f} s")
                self.hang = None
                return [ev]
            return []
        if not waiting:
            return [self._open_hang(now, alive, [], "stopped (state T: SIGSTOP or a debugger)")] if all_stopped else []
        moving = [t for t in alive if not still[id(t)]]
        if moving:
            # someone still runs: a hang only if the others have waited for very long (a busy loop)
            waited = min(self._waited(t, now) for t in waiting)
            busy_odd = [t for t in moving if not _wait_kind(t.latest_where())]
            if not busy_odd or waited < self.busy_hang_s:
                return []
            return [self._open_hang(now, busy_odd, waiting, "busy in user code (its CPU time grows)")]
        if any(not t.stack_covers(now, self.hang_s) for t in alive if not (t.last_tick() and t.last_tick()[4] in "Tt")):
            return []  # wait for stacks of every rank that can be sampled
        if len(gpu) == len(alive) and not gone and min(_gpu_s(t) for t in gpu) < ALL_GPU_S:
            return []  # every rank in its driver and nothing else to tell: a longer look before a weak verdict
        return [self._origin(now, alive, waiting, gone)]

    def _waited(self, t: RankTrack, now: float) -> float:
        span = self.hang_s
        while span < now - (self.first_t or now) and not t.moved(now, span + 5):
            span += 5
        return span

    def _origin(self, now, alive, waiting, gone) -> dict[str, Any]:
        stopped = [t for t in alive if t.last_tick() and t.last_tick()[4] in "Tt"]
        if stopped:
            return self._open_hang(now, stopped, waiting, "stopped (state T: SIGSTOP or a debugger)")
        if gone:
            return self._open_hang(now, gone, waiting, "gone (" + "; ".join(g.exit_text for g in gone) + ")")
        elsewhere = [t for t in alive if t not in waiting]
        loader = [t for t in elsewhere if (t.latest_where() or {}).get("kind") == "dataloader"]
        if loader:
            w = self._stuck_worker(loader[0])
            what = ("in a DataLoader worker" + (f" (pid {w[0]}) at {where_text(w[1])}" if w else "")
                    + ": its main thread waits for a batch")
            return self._open_hang(now, loader, waiting, what, worker=w[0] if w else None)
        if elsewhere:
            io = [t for t in elsewhere if t.last_tick() and t.last_tick()[4] == "D"]
            what = "in I/O (state D)" if io else "in user code, not in a collective"
            return self._open_hang(now, elsewhere, waiting, what + _gpu_note(waiting))
        gpu = [t for t in waiting if t.gpu]
        if gpu:
            return self._gpu_origin(now, gpu, [t for t in waiting if not t.gpu])
        groups: dict[tuple, list[RankTrack]] = {}
        for t in waiting:
            w = t.latest_where() or {}
            groups.setdefault((w.get("call"), w.get("file"), w.get("line")), []).append(t)
        if len(groups) > 1:
            # the collective the others wait in: most ranks; on a tie, the one the ranks were seen in
            # before (a loop's usual all_reduce), not the one that appeared only now
            def familiar(k):
                return sum(any((s[1].get("call"), s[1].get("file"), s[1].get("line")) == k for s in t.stacks if s[0] < now - self.hang_s - 1)
                           for t in alive)
            maj = max(groups, key=lambda k: (len(groups[k]), familiar(k), -min(t.rank for t in groups[k])))
            if len(groups[maj]) == 1 and not familiar(maj):
                # one rank per collective and none seen before: no majority tells which one is odd
                return self._open_hang(now, waiting, [], "in different collectives (no majority and no earlier "
                                                         "sample tells which one is odd: compare their lines)")
            odd = [t for k, ts in groups.items() if k != maj for t in ts]
            return self._open_hang(now, odd, groups[maj], "in a different collective")
        world = max((t.world_size or 0 for t in self.ranks.values()), default=0)
        seen = {t.rank for t in self.ranks.values()}
        if world and len(seen) < world:
            missing = sorted(set(range(world)) - seen)
            return self._open_hang(now, [], waiting, f"not watched here: ranks {_span(missing)} are on other nodes "
                                                     "(watch every node: --gather)", origin_ranks=missing)
        net = self._unreachable(alive)
        if net:
            return self._open_hang(now, [], waiting, net)
        return self._open_hang(now, [], waiting, "no rank is elsewhere: every rank waits in the same collective "
                                                 "(a lost message or a network fault)")

    def _unreachable(self, alive: list[RankTrack]) -> str:
        """The node at the end of most TCP links that cannot deliver (data unacknowledged, retransmitting).
        A node that drops what it receives stalls links in both directions (its peers' data, and the
        acknowledgements of its own), so it is the endpoint the stuck links share."""
        host_of = {a: t.host for t in alive for a in t.tcp.get("local", ())}
        links = {(t.host, host_of.get(a, a)) for t in alive for a in t.tcp.get("stuck", ())}
        links = {lk for lk in links if lk[0] != lk[1]}
        if not links:
            return ""
        ends = Counter(h for lk in links for h in lk).most_common()
        best = sorted(h for h, n in ends if n == ends[0][1])
        shown = ", ".join(f"{a}->{b}" for a, b in sorted(links))
        if len(best) > 1:
            return (f"no rank is elsewhere; TCP between {' and '.join(best)} is not acknowledged ({shown}, "
                    "retransmitting): the network between them drops packets")
        return (f"no rank is elsewhere; packets to or from {best[0]} are dropped: its TCP links hold "
                f"unacknowledged data ({shown}, retransmitting)")

    def _stuck_worker(self, t: RankTrack):
        for pid, w in sorted(t.workers.items()):
            if not w.gone and w.stacks:
                return pid, w.stacks[-1][1]
        return None

    def _gpu_origin(self, now, gpu, coll) -> dict[str, Any]:
        """Ranks that wait on their GPU, the others (if any) in a collective. An NCCL collective that lost a
        peer, or a kernel that never ends, both look like this from outside: the flight recorder decides."""
        held = min(_gpu_s(t) for t in gpu)
        if coll:   # the others wait for them in a collective: they are what keeps the job
            return self._open_hang(now, gpu, coll, f"waits on its GPU for {held:.0f} s: its main thread spins in "
                                   f"{_gpu_lib(gpu)} at one line{_gpu_call(gpu)} (a kernel that does not end, or an "
                                   "NCCL collective that does not complete)", gpu=_gpu_list(gpu))
        ev = self._open_hang(now, [], gpu, f"every rank waits on its GPU for {held:.0f} s: an NCCL collective that "
                             "does not complete (a peer or the network) or a kernel that does not end; decide with "
                             "the flight recorder: ddpdoctor arm / explain --fr", gpu=_gpu_list(gpu))
        ev["confidence"] = self.hang["confidence"] = "low"
        return ev

    def _open_hang(self, now, origin, waiting, what, *, worker=None, origin_ranks=None, gpu=None) -> dict[str, Any]:
        gpu = gpu if gpu is not None else _gpu_list(waiting)
        ws = [t.latest_where() or {} for t in waiting if not t.gpu] or [t.latest_where() or {} for t in waiting]
        calls = Counter((w.get("call"), w.get("file"), w.get("line")) for w in ws).most_common(1)
        call = calls[0][0] if calls else (None, None, None)
        ev = self._event("hang", origin, now, detail=what,
                         waiting={"ranks": sorted(t.rank for t in waiting), "call": call[0],
                                  "at": f"{call[1]}:{call[2]}"},
                         **({"worker_pid": worker} if worker else {}),
                         **({"gpu_wait": gpu} if gpu else {}),
                         **({"origin_ranks": origin_ranks} if origin_ranks else {}))
        seqjudge.annotate(ev, self.ranks.values(), now)
        self.hang = {"_t": now, **ev}
        return ev

    # ------------------------------------------------------------------ events
    def _event(self, kind: str, tracks: list[RankTrack], now: float, *, detail: str = "", **extra) -> dict[str, Any]:
        where = [{"rank": t.rank, "host": t.host, "pid": t.pid, "where": t.latest_where() or {}} for t in tracks]
        return {"kind": kind, "ranks": sorted(t.rank for t in tracks), "hosts": sorted({t.host for t in tracks}),
                "where": sorted(where, key=lambda x: x["rank"]), "detail": detail, "t": round(now, 3), **extra}

    def summary(self, now: float) -> dict[str, Any]:
        return {"kind": "summary", "ranks": sorted({t.rank for t in self.ranks.values()}),
                "hosts": sorted({t.host for t in self.ranks.values()}), "where": [],
                "detail": "", "t": round(now, 3), "watched_s": round(now - (self.first_t or now), 1),
                "events": {k: v for k, v in sorted(self.counts.items())},
                "exits": {k: v for k, v in sorted(self.exits.items())},
                "open": [e["kind"] for e in (self.hang, self.straggler) if e]}


def _gpu_waits(alive: list[RankTrack]) -> list[RankTrack]:
    """Ranks whose node confirmed a GPU wait this tick (watch/gpuwait.py): the same Python stack for the
    whole window and the main thread's CPU time all in the CUDA driver."""
    return [t for t in alive if t.gpu]


def _gpu_s(t: RankTrack) -> float:
    """How long its wait is proven: the driver-only samples (spin_s) where perf sampled it, else the stack."""
    return float(t.gpu.get("spin_s", t.gpu.get("held_s")) or 0)


def _gpu_lib(ts) -> str:
    return next((str(t.gpu.get("lib")) for t in ts if t.gpu and t.gpu.get("lib")), "the CUDA driver")


def _gpu_call(ts) -> str:
    calls = sorted({str(t.gpu["call"]) for t in ts if t.gpu and t.gpu.get("call")})
    return f" ({', '.join(calls)})" if calls else ""


def _gpu_list(ts) -> list[dict[str, Any]]:
    return [{"rank": t.rank, "host": t.host, "pid": t.pid, "at": where_text(t.latest_where()),
             **{k: t.gpu[k] for k in ("lib", "call", "held_s", "spin_s", "how") if t.gpu.get(k) is not None}}
            for t in sorted(ts, key=lambda t: t.rank) if t.gpu]


def _gpu_note(waiting) -> str:
    gpu = [t for t in waiting if t.gpu]
    if not gpu:
        return ""
    rs = ",".join(str(t.rank) for t in sorted(gpu, key=lambda t: t.rank))
    return (f"; rank{'s' if len(gpu) > 1 else ''} {rs} wait{'' if len(gpu) > 1 else 's'} on {'their' if len(gpu) > 1 else 'its'} "
            f"GPU ({_gpu_lib(gpu)}{_gpu_call(gpu)} at {where_text(gpu[0].latest_where())})")


def _span(rs: list[int]) -> str:
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"{rs[0]}-{rs[-1]}"
    return ",".join(map(str, rs))
