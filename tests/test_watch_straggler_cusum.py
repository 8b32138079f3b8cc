"""The CPU CUSUM of watch/straggler.py on synthetic series with the noise of the recorded traces.

Two ranks of the Gloo loop (tests/watch_jobs/train.py) as the loaded 2-core lab machine showed them
(benchmarks/bench_watch.py trace, docs/watch.md "Straggler"): each main thread on a CPU 0.10 of the wall
time and waiting for one 0.35, with a 5 s block's on-CPU time varying by 5 % of the median's (sd) and its
wait for a CPU by 0.11 (the load: one rank gets the cores for a while); 80 py-spy samples a 10 s chunk,
0.27 of them in the collective. A `lag:R:0.1` fault (+10 % of the step, computed) gave its rank 0.17-0.31
more CPU time than the other's (the least, 0.17, at load 24: lag01_s1), 0.12 more waiting for a CPU, and
the others 0.12 more of their samples in the collective.
"""
from __future__ import annotations

import random
import statistics

from ddpdoctor.watch import straggler
from ddpdoctor.watch.judge import Judge

RUN, DELAY, WAIT = 0.10, 0.35, 0.27


def _series(seed: int, seconds: int, lag_rank=None, onset=None, excess=0.17, burst=None, chunks_from=0):
    """Observations of two ranks, one per second: the noise above, from `onset` rank `lag_rank` with
    `excess` more CPU time; `burst` = (start, seconds, excess): a healthy rank 0 transient with its samples
    agreeing; `chunks_from`: py-spy's first chunk ends then. -> (judge events, the most the CPU CUSUM
    accumulated)."""
    rnd = random.Random(seed)
    j = Judge()
    run_ns, delay_ns, ev, most = [0, 0], [0, 0], [], 0.0
    block = [(0.0, 0.0)] * 2
    wait = [0, 0]
    for t in range(seconds):
        if t % 5 == 0:
            block = [(rnd.gauss(0, 0.05), rnd.gauss(0, 0.11 / 2 ** 0.5)) for _ in range(2)]
        obs = []
        for r in range(2):
            x, d = 1 + block[r][0], DELAY + block[r][1]
            lagging = lag_rank == r and onset is not None and t >= onset
            if lagging:
                x, d = x + excess, d + 0.12
            if burst and r == 0 and burst[0] <= t < burst[0] + burst[1]:
                x += burst[2]
            run_ns[r] += int(RUN * x * 1e9)
            delay_ns[r] += int(max(0.0, d) * 1e9)
            o = {"rank": r, "host": "n1", "pid": 100 + r, "world_size": 2, "state": "S", "run_ns": run_ns[r],
                 "delay_ns": delay_ns[r], "io": 0, "stack": None}
            if t % 10 == 9 and t >= chunks_from:
                other_slow = (lag_rank is not None and lag_rank != r and onset is not None and t >= onset) or \
                    (burst and r == 1 and burst[0] <= t < burst[0] + burst[1])
                p = WAIT + (0.12 if other_slow else 0.0)
                wait[r] = sum(rnd.random() < p for _ in range(80))
                o["rec"] = {"n": 80, "wait": wait[r], "lines": {"augment_batch train.py:48": 80 - wait[r]}}
            obs.append(o)
        ev += [e for e in j.feed(obs, float(t)) if e["kind"] in ("straggler", "recovered")]
        most = max([most] + [v[0] for v in j._cusum.values()])
    return ev, most


def test_a_ten_percent_step_is_named_by_the_cpu_cusum_within_a_minute_of_its_onset():
    """+10 % at its least measured CPU excess (0.17), onset 120 s into the watch, 10 seeds: the right rank
    every time, 8 of 10 within 60 s, the median within 55 s, and not "recovered" while it still gets more
    CPU (its mean lag dips under 5 % at times); at the median measured excess (0.26) every seed within
    45 s. The rule before (both measures' mean over 20 s windows: 10 % for 40 s, or 5 lag-seconds above
    6 %) needed 40-95 s on the recorded +10 % traces (docs/watch.md)."""
    for excess, within, share, median in ((0.17, 60, 0.8, 55), (0.26, 45, 1.0, 45)):
        took = []
        for seed in range(10):
            ev, _ = _series(seed, 240, lag_rank=1, onset=120, excess=excess)
            named = [e for e in ev if e["kind"] == "straggler"]
            assert named and named[0]["ranks"] == [1], (seed, ev)
            assert [e["kind"] for e in ev] == ["straggler"], (seed, ev)  # no recovery while it still lags
            took.append(named[0]["t"] - 120)
        assert sum(t <= within for t in took) >= share * len(took) and statistics.median(took) <= median, took


def test_a_larger_excess_is_named_once_the_cusum_has_run_thirty_seconds():
    ev, _ = _series(3, 240, lag_rank=0, onset=120, excess=0.30)
    (e,) = [e for e in ev if e["kind"] == "straggler"]
    assert e["ranks"] == [0] and straggler.RUN_MIN_S - 5 <= e["t"] - 120 <= straggler.RUN_MIN_S + 10


def test_healthy_noisy_ranks_are_never_named_in_five_hours():
    """Five seeds of an hour each of the healthy noise: no event. The noise does accumulate (the CUSUM
    reaches a fifth of its threshold): the threshold, not a lack of noise, keeps them quiet."""
    most = 0.0
    for seed in range(5):
        ev, m = _series(100 + seed, 3600)
        assert ev == [], (seed, ev)
        most = max(most, m)
    assert most >= straggler.RUN_H / 5, most


def test_the_longest_healthy_cpu_excess_recorded_is_not_a_straggler():
    """t_healthyA trace (load 11-12), 530-575 s: healthy rank 0 got 0.04-0.36 more CPU time than rank 1 for
    45 s (0.15 on average) and its peer waited for it (0.46 of its samples in the collective against 0.2):
    the CUSUM reached 1.9 of its 3.0."""
    ev, most = _series(7, 300, burst=(150, 45, 0.15))
    assert ev == [] and most >= 1.0, (ev, most)


def test_a_burst_of_cpu_shorter_than_the_cusums_thirty_seconds_is_not_a_straggler():
    """A rank that got 0.4 more CPU for 20 s (its samples agreeing: the other waited for it) is a transient."""
    ev, _ = _series(11, 300, burst=(150, 20, 0.40))
    assert ev == [], ev


def test_the_cpu_cusum_accumulates_before_the_samples_suffice_to_judge():
    """Watch started beside the job 15 s before the fault (as tests/test_watch_lab.py does), and py-spy's
    first chunks late (a loaded machine: the lab test's `lag:1:0.3` took 65.9 s at load 20 when the CUSUM
    waited for the samples): schedstat accumulates from the first seconds; at the first judgement with
    enough samples (two chunks, 59 s) the rank is named, 44 s after the onset, not 30 s after that."""
    ev, _ = _series(5, 150, lag_rank=1, onset=15, excess=0.5, chunks_from=45)
    (e,) = [e for e in ev if e["kind"] == "straggler"]
    assert e["ranks"] == [1] and e["t"] - 15 <= 50, e["t"]
