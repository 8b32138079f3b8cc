"""Bad-node isolation by pairing (slurm/pairing.py) on a simulated world of up to 1000 nodes."""
import random
from collections import Counter

import pytest

from ddpdoctor.slurm import pairing
from ddpdoctor.slurm.pairing import PairTest


def world(bad=(), slow=()):
    bad, slow = set(bad), set(slow)
    calls = []

    def test(a, b):
        calls.append((a, b))
        if a in bad or b in bad:
            return PairTest(a, b, False, 0.0, "all_reduce timed out")
        return PairTest(a, b, True, 0.5 if a in slow or b in slow else 0.05)
    return test, calls


@pytest.mark.parametrize("n, k", [(4, 1), (9, 2), (64, 3), (1000, 10), (1000, 1), (65, 20)])
def test_bad_nodes_are_named_in_two_rounds_with_constant_work_per_node(n, k):
    rng = random.Random(n * 31 + k)
    bad = set(rng.sample(range(n), k))
    test, calls = world(bad)
    v = pairing.isolate(n, test, seed=7)
    assert v.bad == sorted(bad) and not v.inconclusive and v.rounds == 2
    # round 1 is n/2 tests, round 2 at most two per bad node (its partner is a suspect too)
    assert v.tests == len(calls) <= (n + 1) // 2 + 2 * k
    per_node = Counter(x for pair in calls for x in pair)
    good_left = n - 2 * k
    assert max(per_node.values()) <= 2 + -(-2 * k // good_left)


def test_a_healthy_cluster_takes_one_round_of_n_over_2_tests():
    test, calls = world()
    v = pairing.isolate(1000, test)
    assert v.bad == [] and v.rounds == 1 and len(calls) == 500


def test_slow_node_is_named_apart_from_broken_ones():
    test, _ = world(bad={3}, slow={10})
    v = pairing.isolate(32, test, seed=1)
    assert v.bad == [3] and v.slow == [10]
    assert 3 not in v.cleared and 10 not in v.cleared and v.cleared  # the partners of 3 and 10 are cleared


def test_two_nodes_with_one_bad_cannot_tell_which_and_say_so():
    test, _ = world(bad={1})
    v = pairing.isolate(2, test)
    assert v.bad == [] and v.inconclusive == [0, 1]


def test_odd_count_tests_every_node():
    for n in (3, 5, 7, 63):
        covered = {x for p in pairing.round1(n, seed=n) for x in p}
        assert covered == set(range(n))
