"""Bad-node isolation at scale: pair the nodes, test each pair, re-pair the suspects with known-good nodes.

The strategy large operators use instead of an N x N matrix (N(N-1) probes, unreadable past ~64
nodes): round 1 splits the nodes into disjoint pairs (a triple when N is odd) and tests each pair
once (a short probe, a 1 MiB transfer, a 2-rank Gloo all-reduce); every node of a failed pair, and of a pair much slower than
the median, is a *suspect*. Round 2 pairs each suspect with a node that passed round 1 (spread
over the good nodes so none carries more than ceil(suspects / good)) and tests again: a suspect that
fails with a known-good partner is bad, one that passes is cleared (its round-1 partner was the
bad one). Cost per node: O(1) tests per round instead of O(N); two rounds name every bad node as
long as the bad nodes are fewer than the good ones (else the verdict says "inconclusive" and which
nodes remain, and the full matrix is the fallback).

Pure planning and judgement on plain data: the cluster run executes the tests, tests feed a
simulated world (tests/test_cluster_scale.py).
"""
from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Sequence

SLOW_FACTOR = 3.0   # a pair this many times slower than the median pair is suspect


@dataclass(frozen=True)
class PairTest:
    a: int
    b: int
    ok: bool
    seconds: float = 0.0   # the transfer's and the all-reduce's time; 0 when it failed
    detail: str = ""


@dataclass
class Verdict:
    bad: list[int] = field(default_factory=list)
    slow: list[int] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)
    inconclusive: list[int] = field(default_factory=list)
    rounds: int = 1
    tests: int = 0


def round1(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """Disjoint pairs over 0..n-1 in a seeded random order; with an odd n the last node also pairs
    with the first node of the first pair (that node then takes part in two tests)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    pairs = [(order[k], order[k + 1]) for k in range(0, n - 1, 2)]
    if n % 2 and n > 1:
        pairs.append((order[-1], order[0]))
    return pairs


def suspects(tests: Iterable[PairTest], *, slow_factor: float = SLOW_FACTOR) -> tuple[set[int], set[int], set[int]]:
    """(failed, slow, good) node sets after a round: nodes of failed pairs, of pairs slower than
    slow_factor x the median passing pair, and the rest that were tested."""
    tests = list(tests)
    passed = [t.seconds for t in tests if t.ok and t.seconds > 0]
    median = statistics.median(passed) if passed else 0.0
    failed, slow, seen = set(), set(), set()
    for t in tests:
        seen |= {t.a, t.b}
        if not t.ok:
            failed |= {t.a, t.b}
        elif median and t.seconds > slow_factor * median:
            slow |= {t.a, t.b}
    return failed, slow - failed, seen - failed - slow


def round2(failed: set[int], slow: set[int], good: set[int]) -> list[tuple[int, int]]:
    """Each suspect with a known-good partner, spread over the good nodes (round robin)."""
    pool = sorted(good)
    if not pool:
        return []
    todo = sorted(failed | slow)
    return [(s, pool[k % len(pool)]) for k, s in enumerate(todo)]


def judge(first: Sequence[PairTest], second: Sequence[PairTest] = (), *,
          slow_factor: float = SLOW_FACTOR) -> Verdict:
    """Name the bad (and slow) nodes from round 1 and, where round 1 had suspects, round 2."""
    failed, slow, good = suspects(first, slow_factor=slow_factor)
    v = Verdict(tests=len(first) + len(second))
    if not failed and not slow:
        return v
    if not good:
        v.inconclusive = sorted(failed | slow)
        return v
    v.rounds = 2
    passed = [t.seconds for t in first if t.ok and t.seconds > 0]
    median = statistics.median(passed) if passed else 0.0
    by_suspect: dict[int, list[PairTest]] = {}
    for t in second:
        s = t.a if t.a in failed | slow else t.b
        by_suspect.setdefault(s, []).append(t)
    for s in sorted(failed | slow):
        results = by_suspect.get(s)
        if not results:
            v.inconclusive.append(s)
        elif any(not t.ok for t in results):
            v.bad.append(s)
        elif median and any(t.seconds > slow_factor * median for t in results):
            v.slow.append(s)
        else:
            v.cleared.append(s)
    return v


def isolate(n: int, test, *, seed: int = 0, slow_factor: float = SLOW_FACTOR) -> Verdict:
    """Run both rounds with `test(a, b) -> PairTest` (the cluster run's executor, or a simulation)."""
    first = [test(a, b) for a, b in round1(n, seed)]
    failed, slow, good = suspects(first, slow_factor=slow_factor)
    second = [test(a, b) for a, b in round2(failed, slow, good)] if (failed or slow) else []
    return judge(first, second, slow_factor=slow_factor)
