"""Bad-node isolation by pairing (cluster/pairing.py) on a simulated world of up to 1000 nodes."""
import random
from collections import Counter

import pytest

from ddpdoctor.cluster import pairing
from ddpdoctor.cluster.pairing import PairTest


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


# --- fingerprint diff (DD720) ------------------------------------------------------------------

def _judge_fp(recs, n, reference=None):
    from ddpdoctor import registry, runner
    from ddpdoctor.facts import cluster as cl
    v = cl.ClusterView(recs, n, port=29400, reference=reference)
    (r,) = runner.run_checks([registry.get("DD720")], v, deadline=5)
    return v, r


def test_fingerprint_names_the_odd_node_and_each_key_against_the_majority():
    from test_cluster_view import record
    n = 7
    recs = {i: record(i, n) for i in range(n)}
    recs[4]["versions"] = {**recs[4]["versions"], "driver": "535.104"}
    recs[4]["env"] = {"LD_LIBRARY_PATH": "/opt/old-nccl/lib"}
    recs[6]["settings"] = {"NCCL_IB_DISABLE": "1"}
    v, r = _judge_fp(recs, n)
    msgs = [f.message for f in r.findings]
    assert msgs == ["node5 differs from the majority: LD_LIBRARY_PATH=/opt/old-nccl/lib ((unset)), driver=535.104 (550.54)",
                    "node7 differs from the majority: NCCL_IB_DISABLE=1 ((unset))"]
    assert [f.severity.name for f in r.findings] == ["ERROR", "WARNING"]
    assert v.majority_fingerprint()["driver"] == "550.54"


def test_fingerprint_against_a_reference_file_compares_only_its_keys(tmp_path):
    from test_cluster_view import record
    n = 3
    recs = {i: record(i, n) for i in range(n)}
    _, r = _judge_fp(recs, n, reference={"torch": "2.5.1"})
    assert len(r.findings) == 3 and all("torch=2.13.0 (2.5.1)" in f.message for f in r.findings)
    _, r = _judge_fp(recs, n, reference={"torch": "2.13.0"})
    assert r.findings[0].message == "every node matches the reference file"


@pytest.mark.torchjob
def test_reference_file_errors_are_one_line_exit_2(tmp_path):
    import subprocess
    import sys
    bad = tmp_path / "ref.json"
    bad.write_text("[1, 2]")
    for arg in (str(bad), str(tmp_path / "missing.json")):
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", "cluster", "--reference", arg], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and "--reference" in p.stderr and "Traceback" not in p.stderr, p.stderr
