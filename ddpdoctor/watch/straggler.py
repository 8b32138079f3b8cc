"""Who keeps the others waiting while the job still runs: a straggler rank, or a node held back by its network.

In a synchronous job every rank's step takes as long as the slowest rank's own part. A rank whose own
part is L longer adds L to every other rank's wait inside the collective and L to its own busy time, so
two independent measures estimate the same lag, as a share of the step time:
- stack samples (watch/record.py: py-spy record, ≈80 a rank every 10 s): median(others' share of samples
  inside a collective) - its share;
- schedstat (watch/sample.py, every second): its main thread's busy share (on a CPU + waiting for one,
  a CPU cap's throttling included) - median(others' busy share).
Their expectation is exactly L/step (who arrives last at each step is noise that cancels in the
difference); their mean halves the noise where both see the lag (computing, a CPU cap, a busy core), and
a lag only the samples see (a rank asleep outside the collective: a starved DataLoader, I/O) counts at
half its size. Both are compared over the same seconds: the samples' (10 s chunks, trailing schedstat by
up to 11 s), with schedstat's alone from their end to now. A rank is lagging at a judgement (every 5 s)
when its lag is the largest and >= 10 % of the step; it is named a straggler when the same rank lagged
at every judgement for 40 s, or sooner by a CUSUM of its main thread's CPU time against the others', block
by block (5 s, read every second, so counted from the second a lag starts): its excess over the others'
median, clipped at 40 %, above 12 % accumulates to 3 s over >= 30 s while the samples over those seconds
agree that the others wait for it; or by the same CUSUM on its cgroup's throttled time (a CPU quota,
watch/capjudge.py) or on the time it waits for a CPU (a busy core, watch/corejudge.py): neither shows as CPU time.
A rank starved of CPU by other work on the machine is a straggler for the job too, but a transient one is
not an event: on the loaded 2-core lab machine healthy ranks lagged 10-18 % for up to 35 s; the rules were
chosen by replaying recorded traces (benchmarks/bench_watch.py trace/replay, docs/watch.md).

DDP all-reduces inside loss.backward(): when no rank's samples show an explicit collective, the share of
samples in backward (autograd's compute, the same on every rank, and the reducer's wait) replaces the
share in a collective.

A node whose outgoing traffic is rate-limited (a shaper, `tc ... tbf`) makes every rank wait longer in
its collective while no rank's own part is longer: no rank lags. Its egress shaper's `overlimits` grows
while it holds the job's packets back (watch/sample.py qdiscs, read on each node); that node is named when
it does so at every judgement for 20 s while the ranks wait in their collectives.
"""
from __future__ import annotations

import statistics
from collections import Counter, deque
from typing import Any, Mapping

from ddpdoctor.watch import capjudge, corejudge
from ddpdoctor.watch.record import CHUNK_S

STRAGGLER_WINDOW_S = 20.0  # lag estimated over this (two 10 s record chunks of watch/record.py: ≈160 samples a rank)
MIN_SAMPLES = 120
STRAGGLER_LAG = 0.10      # share of every step the others wait for it (docs/watch.md: chosen on recorded traces)
STRAGGLER_PERSIST_S = 40.0  # the same rank lagging at every judgement for this long (healthy ranks: up to 40 s)
STRAGGLER_EVERY_S = 5.0
# The CPU CUSUM (docs/watch.md "Straggler"): each 5 s block, how much more CPU time a rank's main thread
# got than the others' median, relative to it; clipped, above RUN_K, it accumulates to RUN_H (chosen by
# replaying the recorded traces, bench_watch.py replay)
RUN_K = 0.12           # a block's excess above this accumulates ... (healthy traces: the most over 20 s 0.10,
                       # over 45 s 0.15; a +10 % step: 0.17-0.31 over its whole fault)
RUN_H = 3.0            # ... to this many seconds (a +10 % step at 0.17: 60 s, at 0.26: 30 s; the healthy
                       # traces, 55 min at load 5-22: at most 1.9)
RUN_CLIP = 0.40        # a block counts at most this much: one burst (a rank catching up on a core) adds little
RUN_MIN_S = 30.0       # the accumulation has gone on this long (a shorter transient is not an event) ...
SAMPLES_AGREE = 0.03   # ... and over those seconds the samples show the others waiting for it this much more
MIN_RUN_SHARE = 0.005  # the others' CPU share under which a ratio against it means nothing
EXPLICIT_WAIT = 0.02  # a rank's share of samples in an explicit collective under which it shows none
MIN_PART = 0.05      # the median rank's own part (or busy share) under which a ratio against it is not printed
STRAGGLER_MIN_WAIT = 0.10  # ranks waiting in their collectives at least this share for a node to hold them back
NET_HELD_PER_S = 5.0      # packets a second a node's egress shaper delays (overlimits) to hold the job back
NET_PERSIST_S = 20.0      # ... at every judgement for this long: no shaper, no overlimits (no noise to outlast,
                          # unlike CPU shares); a burst that fills the bucket for a few seconds is not named
NET_KEY = "\0network"     # the open straggler is a node held back by its network (no host is named so)


class StragglerJudge:
    """The straggler half of watch/judge.py's Judge (which holds the ranks' tracks and makes the events)."""

    def _init_straggler(self, lag: float, persist: float, window: float) -> None:
        self.strag_lag, self.strag_persist, self.strag_window = lag, persist, window
        self.min_samples = MIN_SAMPLES  # bench_watch.py replay --thin lowers it with the simulated rate
        self.straggler: dict[str, Any] | None = None  # the open straggler event
        # every judgement: (t, lagging rank or None, the largest lag)
        self._strag_seen: deque = deque(maxlen=200)
        self._cusum: dict[tuple, list] = {}   # rank -> [excess-seconds accumulated, since when]
        self._cusum_t: float | None = None    # the last judgement: where this block of CPU time starts
        self._cap = capjudge.CapCusum()       # the same, on the cgroup's throttled time (watch/capjudge.py)
        self._core = corejudge.CoreCusum()    # and on the time it waits for a CPU (watch/corejudge.py)
        self._strag_next = 0.0
        self.qdisc: dict[str, deque] = {}   # host -> (t, {dev: shaper counters}) (watch/sample.py qdiscs)
        self._net_seen: deque = deque(maxlen=200)   # (t, held-back host or None)

    def _note_qdisc(self, host: str, qd: Mapping[str, Any], now: float) -> None:
        q = self.qdisc.setdefault(host, deque(maxlen=120))
        if not q or q[-1][0] != now:
            q.append((now, qd))

    # ------------------------------------------------------------------ straggler
    def shares(self, now: float, window: float | None = None) -> dict[tuple, dict[str, float]]:
        """Per rank over the window: `busy` the share of wall time its main thread was on a CPU or wanted
        one (schedstat), `wait` the share of its stack samples inside a collective, the share of time its
        main thread waited for a CPU (`delay`) and its cgroup throttled it (`throttled`); `span` the time
        its samples cover, `busy_span` / `busy_fresh` its busy share over that span / from its end to now
        (the samples come in 10 s chunks: they trail schedstat by up to a chunk and a half)."""
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
            while older and sum(c[1] for c in ch) < self.min_samples:
                ch.insert(0, older.pop())
            n = sum(c[1] for c in ch)
            busy = min(1.0, (tk[-1][1] - tk[0][1]) / 1e9 / dt)
            delay = min(1.0, (tk[-1][2] - tk[0][2]) / 1e9 / dt)
            same = [x for x in tk if x[6] == tk[-1][6]]  # since it entered its current cgroup
            tdt = same[-1][0] - same[0][0] if len(same) > 1 else 0.0
            thr = min(1.0, max(0, same[-1][5] - same[0][5]) / 1e9 / tdt) if tdt >= 5 else 0.0
            wait = sum(c[2] for c in ch) / n if n >= self.min_samples else None
            # in backward (DDP's wait, and autograd's compute): None from a recorder that did not count it
            counted = wait is not None and all(len(c) > 4 and c[4] is not None for c in ch)
            bwd = sum(c[4] for c in ch) / n if counted else None
            if wait is not None:
                # a throttled process is frozen wherever it is, its collective's own threads included: the
                # samples frozen inside the collective are its own lost time, not a wait for its peers
                wait *= 1 - thr
                bwd = None if bwd is None else bwd * (1 - thr)
            out[key] = {"busy": busy, "wait": wait, "bwd": bwd, "delay": delay, "throttled": thr, "samples": n,
                        "cgroup": tk[-1][6],
                        # a chunk is collected at the first tick after py-spy wrote it: it covers the CHUNK_S before
                        "span": (ch[0][0] - CHUNK_S - 0.5, ch[-1][0] - 0.5) if wait is not None else None}
        spans = [v["span"] for v in out.values() if v["span"]]
        if spans:
            # one span for every rank (each rank's chunks end within a tick or two of the others'), so that
            # the busy shares compared are over the same seconds as the samples compared
            a = statistics.median(s[0] for s in spans)
            b = min(max(statistics.median(s[1] for s in spans), a + 1.0), now)
            for key, v in out.items():
                t = self.ranks[key]
                v["busy_span"], v["busy_fresh"] = _busy(t.ticks, a, b), _busy(t.ticks, b, now)
                v["span_s"], v["fresh_s"] = b - a, now - b
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
        (a rank sleeping outside the collective: starved DataLoader, I/O) counts at half its size.

        The two are compared over the same seconds: the samples arrive in 10 s chunks, up to 15 s after
        schedstat's seconds, so over the span the samples cover the lag is the mean of both, and from the
        span's end to now schedstat's alone; the two parts weighted by their length. Judged otherwise
        (the last 20 s of schedstat against samples 5-30 s old) a lag that starts is under-estimated for
        10-20 s and a lag that ends over-estimated as long.

        When no rank's samples show an explicit collective (at most EXPLICIT_WAIT of them, each), the
        job waits inside backward: DDP all-reduces the gradients in loss.backward() (its reducer's hooks;
        the last bucket is waited for at the end of backward). The share of samples in backward is then the
        wait measure: every rank computes the same backward, the others wait there L longer than the
        straggler, so `median(others' share in backward) - its share` estimates L as the collective's share
        does. Without it (a recorder that did not count it), the busy share alone judges, at full weight."""
        out = {}
        explicit = explicit_waits(sh)
        key = "wait" if explicit else "bwd"
        for k, v in sh.items():
            others = [o for j, o in sh.items() if j != k]
            if not others:
                continue
            ow = [o["wait"] for o in others if o["wait"] is not None]
            if v["wait"] is None or not ow:
                continue  # too few samples yet: no straggler is named on schedstat alone
            if not explicit and (v["bwd"] is None or any(o["bwd"] is None for o in others)):
                out[k] = v["busy"] - statistics.median(o["busy"] for o in others)
                continue
            d_wait = statistics.median(o[key] for o in others if o[key] is not None) - v[key]
            if "busy_span" not in v:
                out[k] = (v["busy"] - statistics.median(o["busy"] for o in others) + d_wait) / 2
                continue
            d_span = v["busy_span"] - statistics.median(o["busy_span"] for o in others)
            d_fresh = v["busy_fresh"] - statistics.median(o["busy_fresh"] for o in others)
            out[k] = ((d_span + d_wait) / 2 * v["span_s"] + d_fresh * v["fresh_s"]) / (v["span_s"] + v["fresh_s"])
        return out

    def _judge_straggler(self, now: float) -> list[dict[str, Any]]:
        if now < self._strag_next:
            return []
        self._strag_next = now + STRAGGLER_EVERY_S
        sh = self.shares(now)
        # schedstat alone: it accumulates from the watch's first seconds, before the samples are enough to judge
        prev = self._cusum_t
        fast = self._run_cusum(now, sh)
        capped = self._cap_cusum(prev, now, sh)
        cored = self._cap_cusum(prev, now, sh, self._core)
        hb = self.held_back(now)
        net = self._judge_net(now, sh, hb)
        if net is not None:
            return net
        lag = self.lags(sh)
        if len(lag) < 2:
            self._strag_seen.clear()
            return []
        key = max(lag, key=lambda k: lag[k])
        if self.straggler is not None:
            k0 = self.straggler["_key"]
            ticks = {k: t.ticks for k, t in self.ranks.items() if not t.gone}
            if k0 in lag and (lag[k0] >= self.strag_lag / 2 or self._cpu_excess(k0, now) >= RUN_K or self._cap.excess(
                    k0, ticks, now - self.strag_window, now) >= capjudge.THR_K
                    or corejudge.excess(k0, ticks, now - self.strag_window, now)[0] >= corejudge.CORE_K / 2):
                return []  # still lagging, more CPU than the others, throttled, waiting for a CPU: not recovered
            self.straggler = None
            self._strag_seen.clear()
            for acc in (self._cusum, self._core):   # what the wait CUSUM added up while it was open: no new event
                acc.clear()
            return [self._event("recovered", [self.ranks[k0]], now, detail="no longer keeps the others waiting")]
        self._strag_seen.append((now, key if lag[key] >= self.strag_lag else None, lag[key]))
        # keep one judgement at or before the start of the persistence span (judgements come every 5-6 s)
        while len(self._strag_seen) > 1 and self._strag_seen[1][0] <= now - self.strag_persist:
            self._strag_seen.popleft()
        seen = list(self._strag_seen)
        by_cap = by_core = False
        if seen[0][0] <= now - self.strag_persist and {s[1] for s in seen} == {key}:
            pass  # the mean of both measures lagging at every judgement for STRAGGLER_PERSIST_S
        elif (fast or capped or cored) is not None and (fast or capped or cored)[0] in lag:
            key, since = fast or capped or cored
            by_cap, by_core = fast is None and capped is not None, fast is None and capped is None
            # how much: the judgements whose 20 s windows lie wholly after it began, else the newest one. A
            # window still half before the onset averages those seconds in: on the recorded DDP +20 % traces
            # (bench_watch_timeline.py) the lag read 0.03-0.15 for the first 20 s and 0.20-0.22 after, and CI
            # at load reported a +25 % lag as 7 % with the half-window rule.
            seen = [s for s in seen if s[0] >= since + self.strag_window] or seen[-1:]
        else:
            return []
        if hb.get(self.ranks[key].host, (0.0,))[0] >= NET_HELD_PER_S:
            # its node's egress shaper delays packets: the network rule names the node, whichever rule would
            # name the rank (CI at load: the 40 s rule named node2's rank before the network rule named node2)
            return []
        self._cusum.clear()
        self._cap.clear()
        self._core.clear()
        t = self.ranks[key]
        v = sh[key]
        others = [o for k, o in sh.items() if k != key]
        med_wait = statistics.median(o["wait"] for o in others if o["wait"] is not None)
        # a ratio against a median part under MIN_PART of the step says nothing a person can use (the others
        # only wait: 1000000×); the share of the step they wait says it
        if explicit_waits(sh):
            own = 1 - med_wait
            ratio = (1 - v["wait"]) / own if own >= MIN_PART else None
            part = f"its own part {ratio:.2f}× the median's" if ratio else "the others do little else than wait"
        else:  # the waits are inside backward (DDP): its own part is its busy time against the others'
            own = statistics.median(o["busy"] for o in others)
            ratio = v["busy"] / own if own >= MIN_PART else None
            part = ((f"its main thread busy {ratio:.2f}× the median's" if ratio else "the others are hardly busy")
                    + "; the others wait inside backward (DDP)")
        mean_lag = statistics.fmean(s[2] for s in seen)
        # a CPU cap: its cgroup throttled it (cpu.stat); a busy core: it waited for a CPU more than the others
        if by_cap:  # named by its cgroup's throttled time: how much since it began
            why = capjudge.cause(capjudge.throttled_share(t.ticks, since, now) or v["throttled"], v["cgroup"])
        elif v["throttled"] >= 0.05 and v["throttled"] > 2 * statistics.median(o["throttled"] for o in others):
            why = capjudge.cause(v["throttled"], v["cgroup"])
        elif by_core or corejudge.busy_core(key, {k: r.ticks for k, r in self.ranks.items() if not r.gone},
                                            now - self.strag_window, now) or (
                v["delay"] >= 0.1 and v["delay"] > 1.5 * statistics.median(o["delay"] for o in others)
                and v["busy"] - v["delay"] <= 1.1 * statistics.median(o["busy"] - o["delay"] for o in others)):
            # it waited for a CPU more, and was not on a CPU more: a busy core, not more work (a rank that
            # computes more also waits longer for a CPU on a loaded machine, in proportion)
            why = corejudge.cause(corejudge.delay_share(t.ticks, since if by_core else now - self.strag_window, now), t.core)
        else:
            why = ""
        ev = self._event("straggler", [t], now,
                         detail=f"the others wait for it {mean_lag:.0%} of every step ({part})",
                         ratio=round(ratio, 3) if ratio else None, lag=round(mean_lag, 3), extra_where=self._extra_where(key, now),
                         cause=why, others_wait=round(med_wait, 3))
        self.straggler = {"_key": key, **ev}
        return [ev]

    def _run_cusum(self, now: float, sh: Mapping[tuple, Mapping[str, Any]]) -> tuple[tuple, float] | None:
        """A CUSUM of each rank's CPU excess over the 5 s block since the last judgement: x = its main
        thread's CPU time (schedstat on-CPU, without the time it waited for a CPU) over the others' median,
        minus 1; S = max(0, S + dt * (min(x, RUN_CLIP) - RUN_K)). -> (rank, since when it accumulates) when one
        is to be named: S >= RUN_H, accumulated for RUN_MIN_S, still in excess over this block, and the
        samples over those seconds agree that the others wait for it (SAMPLES_AGREE).

        Why on-CPU time, block by block: it is read every second, so a lag is counted from the second it
        starts (the samples come in 10 s chunks written when py-spy ends, watch/record.py: judged over 20 s
        windows they trail an onset by 10-20 s). On a loaded machine the busy share's variation (sd 0.08-0.12
        a 5 s block at load 10-22 on 2 cores) is the time ranks wait for a CPU: one rank gets the cores for a
        while. The time they are on a CPU varies far less: the scheduler shares the cores fairly between
        runnable threads, so ranks with the same work get the same CPU time (healthy traces: sd 0.04-0.06 of
        the median's, at most 0.10 more over 20 s and 0.15 over 45 s), while a rank with more work in its step gets
        more (a +10 % step: 0.17-0.31 more, its own part's excess, not the step's). A rank slowed without
        more work (a CPU cap, a busy core, asleep outside the collective) gets no more CPU: the 40 s rule on
        both measures names it."""
        prev, self._cusum_t = self._cusum_t, now
        if prev is None or now - prev > 4 * STRAGGLER_EVERY_S:
            self._cusum.clear()  # a gap (the job hung, ranks changed): start again
            return None
        run = {k: corejudge.on_cpu(self.ranks[k].ticks, prev - 0.5, now) for k in sh if not self.ranks[k].gone}
        run = {k: r for k, r in run.items() if r is not None}
        if len(run) < 2:
            return None
        dt = now - prev
        best = None
        self._cusum = {k: v for k, v in self._cusum.items() if k in run}  # ranks gone (an elastic restart)
        for k, r in run.items():
            med = statistics.median(v for j, v in run.items() if j != k)
            if med < MIN_RUN_SHARE:
                continue
            x = r / med - 1
            s, since = self._cusum[k] = capjudge.cusum_step(self._cusum.get(k), x, dt, prev, RUN_CLIP, RUN_K)
            if s >= RUN_H and now - since >= RUN_MIN_S and x >= RUN_K and (best is None or s > best[1]):
                if self._samples_lag(k, since, now) >= SAMPLES_AGREE:
                    best = (k, s, since)
        return (best[0], best[2]) if best else None

    def _cap_cusum(self, prev, now: float, sh, cusum=None) -> tuple[tuple, float] | None:
        """capjudge.py's CUSUM of the throttled time (or corejudge.py's of the wait for a CPU) over the block since
        the last judgement: -> (rank, since when) of the most accumulated one whose samples agree."""
        cusum = self._cap if cusum is None else cusum
        if prev is None or now - prev > 4 * STRAGGLER_EVERY_S:
            cusum.clear()
            return None
        ticks = {k: self.ranks[k].ticks for k in sh if not self.ranks[k].gone}
        for k, _, since in cusum.update(prev, now, ticks):
            if self._samples_lag(k, since, now) >= SAMPLES_AGREE:
                return k, since
        return None

    def _cpu_excess(self, key, now: float) -> float:
        """A rank's on-CPU time over the last window against the others' median, minus 1 (0 when unknown)."""
        run = {k: corejudge.on_cpu(t.ticks, now - self.strag_window, now) for k, t in self.ranks.items() if not t.gone}
        others = [r for k, r in run.items() if k != key and r is not None]
        if run.get(key) is None or not others or statistics.median(others) < MIN_RUN_SHARE:
            return 0.0
        return run[key] / statistics.median(others) - 1

    def _samples_lag(self, key, a: float, b: float) -> float:
        """The samples' lag of a rank over the chunks that ended from a to b (the last chunk before b if none):
        the others' median share of samples in a collective (in backward for DDP) minus its own."""
        def share(t):
            ch = [c for c in t.chunks if a < c[0] <= b] or [c for c in t.chunks if c[0] <= b][-1:]
            n = sum(c[1] for c in ch)
            if n < self.min_samples / 3:
                return None
            bwd = sum(c[4] for c in ch) / n if all(len(c) > 4 and c[4] is not None for c in ch) else None
            return sum(c[2] for c in ch) / n, bwd
        shares = {k: share(t) for k, t in self.ranks.items() if not t.gone}
        if any(v is None for v in shares.values()) or key not in shares:
            return 0.0
        i = 0 if any(v[0] > EXPLICIT_WAIT for v in shares.values()) else 1
        if any(v[i] is None for v in shares.values()):
            return 0.0
        return statistics.median(v[i] for k, v in shares.items() if k != key) - shares[key][i]

    def held_back(self, now: float) -> dict[str, tuple[float, str, dict]]:
        """Per host: its egress shaper's rate of delayed packets over the window (the most of its devices),
        with the device and its last counters."""
        out = {}
        for host, q in self.qdisc.items():
            a = [x for x in q if x[0] >= now - self.strag_window]
            if len(a) < 2 or a[-1][0] - a[0][0] < self.strag_window * 0.5:
                continue
            best = (0.0, "", {})
            for dev, row in a[-1][1].items():
                # from the first reading with this shaper: one added during the window counts from then,
                # not only once the window has passed its start (a rank's CPU CUSUM would name first)
                t0, old = next(((x[0], x[1][dev]) for x in a if x[1].get(dev, {}).get("kind") == row.get("kind")),
                               (None, None))
                dt = a[-1][0] - t0 if t0 is not None else 0.0
                if old and dt >= self.strag_window * 0.25:
                    r = max(0, row["overlimits"] - old["overlimits"]) / dt
                    if r > best[0]:
                        best = (r, dev, row)
            out[host] = best
        return out

    def _judge_net(self, now: float, sh, hb) -> list[dict[str, Any]] | None:
        """A node whose outgoing traffic is rate-limited: every rank waits in its collective (no rank's own
        part is longer) while that node's egress shaper keeps delaying packets (its overlimits grow), at
        every judgement for the persistence span. None: nothing to say here (judge the ranks)."""
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
        while len(self._net_seen) > 1 and self._net_seen[1][0] <= now - NET_PERSIST_S:
            self._net_seen.popleft()
        seen = list(self._net_seen)
        if held is None or self.straggler is not None:
            return None
        if seen[0][0] > now - NET_PERSIST_S or {x[1] for x in seen} != {held}:
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


def explicit_waits(sh: Mapping[tuple, Mapping[str, Any]]) -> bool:
    """Some rank's samples show it waiting in an explicit collective (not a job whose every wait is
    inside DDP's backward)."""
    return any(v["wait"] is not None and v["wait"] > EXPLICIT_WAIT for v in sh.values())


def _busy(ticks, a: float, b: float) -> float:
    """A rank's busy share (ticks' busy ns) from a to b: the ticks nearest inside the interval."""
    w = capjudge.span(capjudge.inside(ticks, a, b))
    if w is None:
        return 0.0
    first, last, dt = w
    return min(1.0, (last[1] - first[1]) / 1e9 / dt)
