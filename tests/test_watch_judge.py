"""watch/judge.py on plain data: what moves is progress; the origin of a hang; who keeps the others waiting.

Each test plays ticks (one a second) of rank observations as watch/observe.py produces them.
"""
from __future__ import annotations

from ddpdoctor.render.watch import line
from ddpdoctor.watch.judge import Judge

ALLREDUCE = {"kind": "collective", "call": "all_reduce", "file": "train.py", "line": 72, "func": "<module>"}
BROADCAST = {"kind": "collective", "call": "broadcast", "file": "train.py", "line": 71, "func": "<module>"}
SLEEP = {"kind": "python", "call": "sleep", "file": "train.py", "line": 67, "func": "<module>"}
COMPUTE = {"kind": "python", "call": "tanh", "file": "train.py", "line": 48, "func": "augment_batch"}


class Rank:
    def __init__(self, rank, host="n1", busy=0.5, io=0, where=ALLREDUCE, sig="a", state="S", delay=0.0):
        """busy: its main thread's share of wall time on a CPU; delay: waiting for one (schedstat)."""
        self.rank, self.host, self.pid = rank, host, 100 + rank
        self.busy, self.io_rate, self.where, self.sig, self.state = busy, io, where, sig, state
        self.delay = delay
        self.run_ns = self.io = self.delay_ns = 0
        self.exit = None

    def obs(self, t, stack=True, rec=None):
        self.run_ns += int(self.busy * 1e9)
        self.delay_ns += int(self.delay * 1e9)
        self.io += self.io_rate
        o = {"rank": self.rank, "host": self.host, "pid": self.pid, "world_size": None, "state": self.state,
             "run_ns": self.run_ns, "delay_ns": self.delay_ns, "io": self.io,
             "stack": {"ok": True, "where": self.where, "sig": self.sig, "active": self.busy > 0} if stack else None}
        if self.exit is not None:
            o.update(state="gone", exit=self.exit, exit_text="killed by SIGKILL" if self.exit == 9 else "exit code 0")
        if rec:
            o["rec"] = rec
        return o


def play(judge, ranks, seconds, start=0, **kw):
    events = []
    for t in range(start, start + seconds):
        events += judge.feed([r.obs(t, **kw) for r in ranks], float(t))
    return events


def test_a_loop_of_small_all_reduces_is_progress_although_every_sample_is_the_same_line():
    ranks = [Rank(0, busy=0.9), Rank(1, busy=0.9)]  # same stack every sample, but the CPU time grows
    assert play(Judge(), ranks, 60) == []


def test_a_large_collective_whose_data_moves_is_not_a_hang():
    ranks = [Rank(0, busy=0.0, io=5 << 20), Rank(1, busy=0.0, io=5 << 20)]  # main threads wait, Gloo's threads send
    assert play(Judge(), ranks, 60) == []


def test_ranks_that_all_sleep_outside_a_collective_are_not_a_hang():
    ranks = [Rank(0, busy=0.0, where=SLEEP), Rank(1, busy=0.0, where=SLEEP)]  # nobody waits for anybody
    assert play(Judge(), ranks, 60) == []


def test_a_rank_sleeping_in_user_code_is_the_origin_within_ten_seconds_of_the_stall():
    j = Judge()
    r0, r1 = Rank(0, busy=0.8), Rank(1, busy=0.8)
    assert play(j, [r0, r1], 20) == []
    r0.busy, r1.busy, r1.where, r1.sig = 0.0, 0.0, SLEEP, "b"
    ev = play(j, [r0, r1], 15, start=20)
    hang = [e for e in ev if e["kind"] == "hang"]
    assert len(hang) == 1 and hang[0]["t"] - 20 <= 10
    assert hang[0]["ranks"] == [1] and hang[0]["detail"] == "in user code, not in a collective"
    assert hang[0]["waiting"] == {"ranks": [0], "call": "all_reduce", "at": "train.py:72"}
    assert "hang: rank 1 on n1 (pid 101) in user code" in line({**hang[0], "wall": 0})
    r0.busy, r1.busy, r1.where, r1.sig = 0.8, 0.8, ALLREDUCE, "c"
    assert [e["kind"] for e in play(j, [r0, r1], 10, start=35)] == ["recovered"]


def test_a_stopped_rank_is_the_origin():
    j = Judge()
    ranks = [Rank(0, busy=0.8), Rank(1, busy=0.8), Rank(2, busy=0.8)]
    play(j, ranks, 10)
    for r in ranks:
        r.busy = 0.0
    ranks[2].state, ranks[2].where, ranks[2].sig = "T", COMPUTE, "z"
    (e,) = [e for e in play(j, ranks, 12, start=10) if e["kind"] == "hang"]
    assert e["ranks"] == [2] and e["detail"].startswith("stopped") and e["waiting"]["ranks"] == [0, 1]


def test_the_minority_collective_is_the_odd_one():
    j = Judge()
    ranks = [Rank(i, busy=0.0) for i in range(3)]
    ranks[2].where = BROADCAST
    (e,) = [e for e in play(j, ranks, 15) if e["kind"] == "hang"]
    assert e["ranks"] == [2] and e["detail"] == "in a different collective" and e["waiting"]["ranks"] == [0, 1]


def test_two_ranks_in_two_collectives_never_seen_before_are_both_named_not_guessed():
    ranks = [Rank(0, busy=0.0), Rank(1, busy=0.0, where=BROADCAST)]
    (e,) = [e for e in play(Judge(), ranks, 15) if e["kind"] == "hang"]
    assert e["ranks"] == [0, 1] and "no majority" in e["detail"]


def test_every_rank_here_waiting_names_the_ranks_on_other_nodes():
    ranks = [Rank(0, busy=0.0), Rank(1, busy=0.0)]
    obs_world = 4
    j = Judge()
    ev = []
    for t in range(15):
        ev += j.feed([{**r.obs(t), "world_size": obs_world} for r in ranks], float(t))
    (e,) = [e for e in ev if e["kind"] == "hang"]
    assert e["ranks"] == [] and e["origin_ranks"] == [2, 3] and "--gather" in e["detail"]


def test_a_rank_that_finished_is_no_event_and_a_killed_one_is():
    j = Judge()
    r0, r1 = Rank(0), Rank(1)
    play(j, [r0, r1], 3)
    r0.exit, r1.exit = 0, 9
    ev = play(j, [r0, r1], 1, start=3)
    assert [(e["kind"], e["ranks"], e["detail"]) for e in ev] == [("rank_gone", [1], "killed by SIGKILL")]
    assert j.summary(4.0)["exits"] == {"exit code 0": 1, "killed by SIGKILL": 1}


def _chunk(wait_share, line="augment_batch train.py:48"):
    n = 100
    w = int(n * wait_share)
    return {"n": n, "wait": w, "lines": {line: n - w}}


def play_shares(j, ranks, seconds, wait, start=0, rnd=None):
    """Ticks with a 100-sample record chunk every 10 s; `wait(rank)` is its share of samples in the collective."""
    ev = []
    for t in range(start, start + seconds):
        recs = [_chunk(wait(r.rank)) if t % 10 == 9 else None for r in ranks]
        ev += j.feed([r.obs(t, stack=t % 4 == 0, rec=rec) for r, rec in zip(ranks, recs)], float(t))
    return ev


def test_the_rank_the_others_wait_for_is_the_straggler_with_its_lag_ratio_and_line():
    j = Judge()
    ranks = [Rank(i, busy=0.6) for i in range(4)]
    ranks[2].busy = 0.75  # it computes 15 % of the wall time longer; the others wait that much more
    ev = play_shares(j, ranks, 90, lambda r: 0.05 if r == 2 else 0.30)
    (e,) = [e for e in ev if e["kind"] == "straggler"]
    assert e["ranks"] == [2] and round(e["ratio"], 2) == round(0.95 / 0.70, 2)
    assert 0.15 <= e["lag"] <= 0.2  # (busy 0.15 + wait 0.25) / 2 over the samples, busy alone since
    assert e["extra_where"] == "augment_batch train.py:48"
    assert e["t"] <= 20 + 40 + 5  # a 20 s window filled, then 40 s of the same rank lagging
    assert (f"straggler: rank 2 on n1 (pid 102): the others wait for it {e['lag']:.0%} of every step (its own "
            "part 1.36× the median's)") in line({**e, "wall": 0})


def test_a_lag_shorter_than_the_persistence_is_no_event():
    """A rank starved of CPU by other work for 25 s (as seen on the loaded lab machine: it waits for a CPU
    0.2 of the time longer, on a CPU as long as the others) is not named."""
    j = Judge()
    ranks = [Rank(i, busy=0.2, delay=0.3) for i in range(2)]
    ev = play_shares(j, ranks, 60, lambda r: 0.25)
    ranks[1].delay = 0.5
    ev += play_shares(j, ranks, 25, lambda r: 0.05 if r == 1 else 0.45, start=60)
    ranks[1].delay = 0.3
    ev += play_shares(j, ranks, 120, lambda r: 0.25, start=85)
    assert ev == []


def test_a_lag_on_schedstat_alone_names_nobody_without_stack_samples():
    j = Judge()
    ranks = [Rank(0, busy=0.3), Rank(1, busy=0.9)]
    assert [e for e in play(j, ranks, 120) if e["kind"] == "straggler"] == []


def test_a_straggler_that_catches_up_is_recovered():
    j = Judge()
    ranks = [Rank(i, busy=0.5) for i in range(3)]
    ranks[0].busy = 0.7
    ev = play_shares(j, ranks, 80, lambda r: 0.05 if r == 0 else 0.40)
    assert [e["kind"] for e in ev] == ["straggler"]
    ranks[0].busy = 0.5
    ev = play_shares(j, ranks, 60, lambda r: 0.25, start=80)
    assert [(e["kind"], e["ranks"]) for e in ev] == [("recovered", [0])]


def test_balanced_ranks_with_noise_name_no_straggler():
    import random
    rnd = random.Random(7)
    j = Judge()
    ranks = [Rank(i, busy=0.6) for i in range(4)]
    ev = []
    for t in range(0, 600):
        for r in ranks:
            r.busy = 0.6 + rnd.uniform(-0.05, 0.05)
        recs = [_chunk(0.2 + rnd.uniform(-0.04, 0.04)) if t % 10 == 9 else None for _ in ranks]
        ev += j.feed([r.obs(t, stack=t % 4 == 0, rec=rec) for r, rec in zip(ranks, recs)], float(t))
    assert ev == []


def test_every_rank_waiting_with_tcp_stuck_towards_one_node_names_that_node():
    j = Judge()
    ranks = [Rank(i, host=f"node{i + 1}", busy=0.0) for i in range(3)]
    addr = {0: "198.18.4.1", 1: "198.18.4.2", 2: "198.18.4.3"}
    ring_stuck = {0: [], 1: ["198.18.4.3"], 2: ["198.18.4.1"]}  # node3 drops input: 2->3 and 3->1 stall
    ev = []
    for t in range(15):
        ev += j.feed([{**r.obs(t), "tcp": {"local": [addr[r.rank]], "stuck": ring_stuck[r.rank]}} for r in ranks],
                     float(t))
    (e,) = [e for e in ev if e["kind"] == "hang"]
    assert "packets to or from node3 are dropped" in e["detail"] and "node2->node3, node3->node1" in e["detail"]


def test_a_node_whose_egress_shaper_holds_packets_back_is_the_straggler_node():
    """tbf on node2's interface: both ranks wait in the collective alike (no rank's own part is longer),
    node2's qdisc delays packets every second; node1 has no shaper."""
    j = Judge()
    ranks = [Rank(0, host="node1", busy=0.4), Rank(1, host="node2", busy=0.4)]
    ev = []
    for t in range(90):
        held = 40 * t if t >= 20 else 0
        qd = {"node1": {}, "node2": {"eth0": {"kind": "tbf", "rate": 250000, "overlimits": held, "drops": 0,
                                               "backlog": 9000, "bytes": 0}}}
        recs = [_chunk(0.5) if t % 10 == 9 else None for _ in ranks]
        ev += j.feed([{**r.obs(t, stack=t % 4 == 0, rec=rec), **({"qdisc": qd[r.host]} if t % 5 == 0 else {})}
                      for r, rec in zip(ranks, recs)], float(t))
    (e,) = ev
    assert e["kind"] == "straggler" and e["ranks"] == [1] and e["hosts"] == ["node2"] and e["node"] == "node2"
    assert "tbf on eth0 at 2 Mbit/s delays 40 packets/s" in e["detail"] and "waits in its collective 50%" in e["detail"]
    assert e["t"] - 20 <= 60


def test_a_shaper_that_delays_nothing_names_no_node():
    j = Judge()
    ranks = [Rank(0, host="node1", busy=0.4), Rank(1, host="node2", busy=0.4)]
    ev = []
    for t in range(120):
        qd = {"eth0": {"kind": "tbf", "rate": 250000, "overlimits": 3, "drops": 0, "backlog": 0, "bytes": 0}}
        recs = [_chunk(0.5) if t % 10 == 9 else None for _ in ranks]
        ev += j.feed([{**r.obs(t, rec=rec), "qdisc": qd} for r, rec in zip(ranks, recs)], float(t))
    assert ev == []
