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

A straggler is the rank the others wait for: the others' stack samples sit in the collective while
it computes. From py-spy record chunks (watch/record.py, ≈100 samples a rank every 10 s) the share of a
rank's samples outside the collective is its own part of every step; the straggler has the largest, and
its own part over the median rank's is how much longer its steps' work takes ("steps 1.4× the median").
The main thread's schedstat wait for a CPU tells a CPU cap or a busy core apart from more work.
"""
from __future__ import annotations

import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

HANG_S = 6.0              # nothing moved for this long: a rank waits / the job hangs
BUSY_HANG_S = 120.0       # others wait this long while one rank computes: a hang with a busy origin
MOVE_BUSY_SHARE = 0.02    # main-thread busy time over HANG_S that counts as moving (a Gloo wait adds 0)
MOVE_IO_BYTES = 64 << 10  # I/O over HANG_S that counts as moving (store polls are a few hundred bytes)
STRAGGLER_WINDOW_S = 20.0  # lag estimated over this (two 10 s record chunks of watch/record.py: ≈160 samples a rank)
MIN_SAMPLES = 120
STRAGGLER_LAG = 0.08      # share of every step the others wait for it (docs/watch.md: chosen on recorded traces)
STRAGGLER_PERSIST_S = 30.0  # the same rank lagging at every judgement for this long
STRAGGLER_EVERY_S = 5.0
STRAGGLER_MIN_WAIT = 0.10  # ranks waiting in their collectives at least this share for a node to hold them back
NET_HELD_PER_S = 5.0      # packets a second a node's egress shaper delays (overlimits) to hold the job back
NET_KEY = "\0network"     # the open straggler is a node held back by its network (no host is named so)
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
    chunks: deque = field(default_factory=lambda: deque(maxlen=30))   # (t, samples, waiting, {line: n})
    workers: dict = field(default_factory=dict)                        # pid -> RankTrack of a child
    tcp: dict = field(default_factory=dict)                            # watch/netstuck.py, latest
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
        a, b = old[-1], self.ticks[-1]
        dt = max(b[0] - a[0], 1e-3)
        if (b[1] - a[1]) / 1e9 / dt >= MOVE_BUSY_SHARE or b[3] - a[3] >= MOVE_IO_BYTES:
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


class Judge:
    def __init__(self, *, hang_s: float = HANG_S, busy_hang_s: float = BUSY_HANG_S,
                 strag_lag: float = STRAGGLER_LAG, strag_persist: float = STRAGGLER_PERSIST_S,
                 strag_window: float = STRAGGLER_WINDOW_S):
        self.ranks: dict[tuple[str, int], RankTrack] = {}
        self.hang_s = hang_s
        self.busy_hang_s = busy_hang_s
        self.hang: dict[str, Any] | None = None       # the open hang event
        self.straggler: dict[str, Any] | None = None  # the open straggler event
        self.strag_lag, self.strag_persist, self.strag_window = strag_lag, strag_persist, strag_window
        self._strag_seen: deque = deque(maxlen=200)   # (t, lagging rank or None, its lag) every judgement
        self._strag_next = 0.0
        self.qdisc: dict[str, deque] = {}   # host -> (t, {dev: shaper counters}) (watch/sample.py qdiscs)
        self._net_seen: deque = deque(maxlen=200)   # (t, held-back host or None)
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
        tr.ticks.append((now, o["run_ns"] + o["delay_ns"], o["delay_ns"], o["io"], o["state"],
                         o.get("throttled_ns", 0), o.get("cgroup", "")))
        if isinstance(o.get("tcp"), dict):
            tr.tcp = o["tcp"]
        if isinstance(o.get("qdisc"), dict):
            q = self.qdisc.setdefault(tr.host, deque(maxlen=120))
            if not q or q[-1][0] != now:
                q.append((now, o["qdisc"]))
        rec = o.get("rec")
        if rec and rec.get("n"):
            tr.chunks.append((now, rec["n"], rec["wait"], rec.get("lines") or {}))
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
        still = {id(t): not t.moved(now, self.hang_s) for t in alive}
        waiting = [t for t in alive if still[id(t)] and _wait_kind(t.latest_where()) and t.stack_covers(now, self.hang_s)]
        gone = [t for t in self.ranks.values() if t.gone]
        # Every rank stopped (state T) and still: nobody waits in a collective, yet nothing can move.
        # The only way a one-rank job hangs visibly from outside (SIGSTOP, a debugger); seen on a GPU job.
        all_stopped = all(still[id(t)] and _stopped(t) for t in alive)
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
            return self._open_hang(now, elsewhere, waiting, what)
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

    def _open_hang(self, now, origin, waiting, what, *, worker=None, origin_ranks=None) -> dict[str, Any]:
        ws = [t.latest_where() or {} for t in waiting]
        calls = Counter((w.get("call"), w.get("file"), w.get("line")) for w in ws).most_common(1)
        call = calls[0][0] if calls else (None, None, None)
        ev = self._event("hang", origin, now, detail=what,
                         waiting={"ranks": sorted(t.rank for t in waiting), "call": call[0],
                                  "at": f"{call[1]}:{call[2]}"},
                         **({"worker_pid": worker} if worker else {}),
                         **({"origin_ranks": origin_ranks} if origin_ranks else {}))
        self.hang = {"_t": now, **ev}
        return ev

    # ------------------------------------------------------------------ straggler
    def shares(self, now: float, window: float | None = None) -> dict[tuple, dict[str, float]]:
        """Per rank over the window: `busy` the share of wall time its main thread was on a CPU or wanted
        one (schedstat), `wait` the share of its stack samples inside a collective, the share of time its
        main thread waited for a CPU (`delay`) and its cgroup throttled it (`throttled`)."""
        window = self.strag_window if window is None else window
        out = {}
        for key, t in self.ranks.items():
            if t.gone:
                continue
            tk = t.since(now - window)
            dt = tk[-1][0] - tk[0][0] if len(tk) > 1 else 0.0
            if dt < window * 0.6:
                continue
            # the record chunks that ended in the window, and older ones while they hold too few samples
            # (a 10 s chunk ends every 10-11 s: a 20 s window holds one or two)
            ch = [c for c in t.chunks if c[0] > now - window]
            older = [c for c in t.chunks if now - 2 * window < c[0] <= now - window]
            while older and sum(c[1] for c in ch) < MIN_SAMPLES:
                ch.insert(0, older.pop())
            n = sum(c[1] for c in ch)
            busy = min(1.0, (tk[-1][1] - tk[0][1]) / 1e9 / dt)
            delay = min(1.0, (tk[-1][2] - tk[0][2]) / 1e9 / dt)
            same = [x for x in tk if x[6] == tk[-1][6]]  # since it entered its current cgroup
            tdt = same[-1][0] - same[0][0] if len(same) > 1 else 0.0
            thr = min(1.0, max(0, same[-1][5] - same[0][5]) / 1e9 / tdt) if tdt >= 5 else 0.0
            wait = sum(c[2] for c in ch) / n if n >= MIN_SAMPLES else None
            if wait is not None:
                # a throttled process is frozen wherever it is, its collective's own threads included: the
                # samples frozen inside the collective are its own lost time, not a wait for its peers
                wait *= 1 - thr
            out[key] = {"busy": busy, "wait": wait, "delay": delay, "throttled": thr, "samples": n,
                        "cgroup": tk[-1][6]}
        return out

    @staticmethod
    def lags(sh: Mapping[tuple, Mapping[str, Any]]) -> dict[tuple, float]:
        """How much of every step the others wait for each rank, from two measures of the same thing.
        In a synchronous job every rank's step takes as long as the slowest rank's own part; a rank that
        takes L longer adds L to every other rank's wait in the collective and to its own busy time, so
        per unit of wall time both `median(others' wait) - its wait` (stack samples) and `its busy -
        median(others' busy)` (schedstat) estimate L over the step time (their expectation is exactly L:
        the per-step noise of who arrives last cancels in the difference). The mean of the two halves
        the noise where both see the lag (computing, a CPU cap, a busy core); a lag only the samples see
        (a rank sleeping outside the collective: starved DataLoader, I/O) counts at half its size."""
        out = {}
        for k, v in sh.items():
            others = [o for j, o in sh.items() if j != k]
            if not others:
                continue
            d_busy = v["busy"] - statistics.median(o["busy"] for o in others)
            ow = [o["wait"] for o in others if o["wait"] is not None]
            if v["wait"] is None or not ow:
                continue  # too few samples yet: no straggler is named on schedstat alone
            d_wait = statistics.median(ow) - v["wait"]
            out[k] = (d_busy + d_wait) / 2
        return out

    def _judge_straggler(self, now: float) -> list[dict[str, Any]]:
        if now < self._strag_next:
            return []
        self._strag_next = now + STRAGGLER_EVERY_S
        sh = self.shares(now)
        net = self._judge_net(now, sh)
        if net is not None:
            return net
        lag = self.lags(sh)
        if len(lag) < 2:
            self._strag_seen.clear()
            return []
        key = max(lag, key=lambda k: lag[k])
        if self.straggler is not None:
            k0 = self.straggler["_key"]
            if k0 in lag and lag[k0] >= self.strag_lag / 2:
                return []
            self.straggler = None
            self._strag_seen.clear()
            return [self._event("recovered", [self.ranks[k0]], now, detail="no longer keeps the others waiting")]
        self._strag_seen.append((now, key if lag[key] >= self.strag_lag else None, lag[key]))
        # keep one judgement at or before the start of the persistence span (judgements come every 5-6 s)
        while len(self._strag_seen) > 1 and self._strag_seen[1][0] <= now - self.strag_persist:
            self._strag_seen.popleft()
        seen = list(self._strag_seen)
        if seen[0][0] > now - self.strag_persist or {s[1] for s in seen} != {key}:
            return []
        t = self.ranks[key]
        v = sh[key]
        others = [o for k, o in sh.items() if k != key]
        med_wait = statistics.median(o["wait"] for o in others if o["wait"] is not None)
        ratio = (1 - v["wait"]) / max(1 - med_wait, 1e-6)
        mean_lag = statistics.fmean(s[2] for s in seen)
        # a CPU cap: its cgroup throttled it (cpu.stat); a busy core: it waited for a CPU more than the others
        if v["throttled"] >= 0.05 and v["throttled"] > 2 * statistics.median(o["throttled"] for o in others):
            why = (f"throttled by a CPU cap {v['throttled']:.0%} of the time "
                   f"(cgroup {v['cgroup']}: cpu.cfs_quota_us / cpu.max)")
        elif v["delay"] >= 0.1 and v["delay"] > 1.5 * statistics.median(o["delay"] for o in others):
            why = f"waiting for a CPU {v['delay']:.0%} of the time (a busy core)"
        else:
            why = ""
        ev = self._event("straggler", [t], now,
                         detail=f"the others wait for it {mean_lag:.0%} of every step (its own part {ratio:.2f}× the median's)",
                         ratio=round(ratio, 3), lag=round(mean_lag, 3), extra_where=self._extra_where(key, now),
                         cause=why, others_wait=round(med_wait, 3))
        self.straggler = {"_key": key, **ev}
        return [ev]

    def held_back(self, now: float) -> dict[str, tuple[float, str, dict]]:
        """Per host: its egress shaper's rate of delayed packets over the window (the most of its devices),
        with the device and its last counters."""
        out = {}
        for host, q in self.qdisc.items():
            a = [x for x in q if x[0] >= now - self.strag_window]
            if len(a) < 2 or a[-1][0] - a[0][0] < self.strag_window * 0.5:
                continue
            dt = a[-1][0] - a[0][0]
            best = (0.0, "", {})
            for dev, row in a[-1][1].items():
                old = a[0][1].get(dev)
                if old and old.get("kind") == row.get("kind"):
                    r = max(0, row["overlimits"] - old["overlimits"]) / dt
                    if r > best[0]:
                        best = (r, dev, row)
            out[host] = best
        return out

    def _judge_net(self, now: float, sh) -> list[dict[str, Any]] | None:
        """A node whose outgoing traffic is rate-limited: every rank waits in its collective (no rank's own
        part is longer) while that node's egress shaper keeps delaying packets (its overlimits grow), at
        every judgement for the persistence span. None: nothing to say here (judge the ranks)."""
        hb = self.held_back(now)
        waits = [v["wait"] for v in sh.values() if v["wait"] is not None]
        med_wait = statistics.median(waits) if waits else 0.0
        host = max(hb, key=lambda h: hb[h][0]) if hb else None
        held = host if host and hb[host][0] >= NET_HELD_PER_S and med_wait >= STRAGGLER_MIN_WAIT else None
        if self.straggler is not None and self.straggler["_key"][0] == NET_KEY:
            h0 = self.straggler["_key"][1]
            if h0 in hb and hb[h0][0] >= NET_HELD_PER_S / 2:
                return []
            self.straggler = None
            self._net_seen.clear()
            return [self._event("recovered", [t for t in self.alive() if t.host == h0], now,
                                detail="its egress is no longer held back")]
        self._net_seen.append((now, held))
        while len(self._net_seen) > 1 and self._net_seen[1][0] <= now - self.strag_persist:
            self._net_seen.popleft()
        seen = list(self._net_seen)
        if held is None or self.straggler is not None:
            return None
        if seen[0][0] > now - self.strag_persist or {x[1] for x in seen} != {held}:
            return []  # a node may be held back: no rank straggler is judged meanwhile
        rate, dev, row = hb[held]
        limit = f" at {row['rate'] * 8 / 1e6:g} Mbit/s" if row.get("rate") else ""
        tracks = [t for t in self.alive() if t.host == held]
        ev = self._event("straggler", tracks, now,
                         detail=(f"its outgoing traffic is rate-limited: {row['kind']} on {dev}{limit} delays "
                                 f"{rate:.0f} packets/s; every rank waits in its collective {med_wait:.0%} of the time"),
                         ratio=None, lag=round(med_wait, 3), extra_where="",
                         cause=f"network: the egress shaper of {held} (tc -s qdisc show dev {dev})",
                         others_wait=round(med_wait, 3), node=held)
        self.straggler = {"_key": (NET_KEY, held), **ev}
        return [ev]

    def _extra_where(self, key, now) -> str:
        """Where the straggler spends the time the others do not: the line whose share of its samples
        exceeds the median share of the others' samples the most."""
        def shares(t):
            c: Counter = Counter()
            n = 0
            for ch in t.chunks:
                if ch[0] > now - self.strag_window:
                    c.update(ch[3])
                    n += ch[1]
            return {k: v / max(n, 1) for k, v in c.items() if k != "?"}
        mine = shares(self.ranks[key])
        if not mine:
            return ""
        theirs = [shares(t) for k, t in self.ranks.items() if k != key and not t.gone]
        return max(mine, key=lambda w: mine[w] - (statistics.median(s.get(w, 0.0) for s in theirs) if theirs else 0))

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


def _span(rs: list[int]) -> str:
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"{rs[0]}-{rs[-1]}"
    return ",".join(map(str, rs))
