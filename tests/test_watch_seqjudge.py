"""watch/seqjudge.py and the judge's use of it, on plain data: the debug server's sequence numbers decide
progress whatever the CPU does (NCCL: a rank spinning in a device sync, its stack in user code)."""
from __future__ import annotations

from ddpdoctor.render.watch import line
from ddpdoctor.watch import seqjudge
from ddpdoctor.watch.judge import Judge

ITEM = {"kind": "python", "call": "item", "file": "train.py", "line": 80, "func": "<module>"}  # loss.item()
SLEEP = {"kind": "python", "call": "sleep", "file": "train.py", "line": 67, "func": "<module>"}
COMPUTE = {"kind": "python", "call": "tanh", "file": "train.py", "line": 48, "func": "augment_batch"}


class Rank:
    """An NCCL-like rank: its main thread busy (a spin in cudaStreamSynchronize) while it runs or waits."""

    def __init__(self, rank, busy=1.0, where=ITEM, state="S"):
        self.rank, self.pid, self.busy, self.where, self.state = rank, 100 + rank, busy, where, state
        self.run_ns = 0
        self.enq = self.done = 0
        self.moving = True      # enters and completes a collective every second
        self.enters = True      # False: never enters the next one
        self.answers = True     # False: its server gives nothing (SIGSTOP stops it too)

    def obs(self, t):
        self.run_ns += int(self.busy * 1e9)
        if self.moving:
            self.enq += 1
            self.done += 1
        o = {"rank": self.rank, "host": "n1", "pid": self.pid, "world_size": None, "state": self.state,
             "run_ns": self.run_ns, "delay_ns": 0, "io": 0,
             "stack": {"ok": True, "where": self.where, "sig": str(self.where["line"]), "active": True}}
        if self.answers and t % 2 == 0:  # a poll every 2 s
            o["seq"] = {"t": t, "pgs": {"0": {"enq": self.enq, "done": self.done, "op": "all_reduce"}}}
        return o

    def stall(self, enter: bool):
        """Stop: entered the next collective and waits in it (enter), or never entered it."""
        self.moving = False
        if enter:
            self.enq += 1


def play(judge, ranks, seconds, start=0):
    events = []
    for t in range(start, start + seconds):
        events += judge.feed([r.obs(t) for r in ranks], float(t))
    return events


def test_busy_ranks_whose_collectives_complete_are_no_hang():
    assert play(Judge(), [Rank(0), Rank(1)], 60) == []


def test_nccl_ranks_spinning_in_a_device_sync_wait_for_the_rank_that_never_entered():
    """Every main thread busy at the same line the whole time: CPU and stacks say "moving"; the numbers say
    rank 0 waits in collective #21 and rank 1 never entered it."""
    j = Judge()
    r0, r1 = Rank(0), Rank(1, where=COMPUTE)
    assert play(j, [r0, r1], 20) == []
    r0.stall(enter=True)
    r1.stall(enter=False)
    r1.busy, r1.where = 0.0, SLEEP
    ev = play(j, [r0, r1], 15, start=20)
    (hang,) = [e for e in ev if e["kind"] == "hang"]
    assert hang["t"] - 20 <= 10
    assert hang["ranks"] == [1] and hang["source"] == "debug server" and hang["seq"] == 21
    assert hang["collective"] == "all_reduce" and hang["pg"] == "0"
    assert hang["detail"] == "never entered collective #21 all_reduce of pg 0 (debug server): in user code"
    assert hang["waiting"] == {"ranks": [0], "call": "all_reduce", "at": "#21 of pg 0"}
    text = line({**hang, "wall": 0})
    assert "rank 1 on n1 (pid 101) never entered collective #21 all_reduce" in text, text
    assert "rank 0 waits in all_reduce at #21 of pg 0" in text, text
    r0.moving = r1.moving = True
    assert [e["kind"] for e in play(j, [r0, r1], 8, start=35)] == ["recovered"]


def test_an_origin_that_computes_is_a_long_step_until_busy_hang_s():
    j = Judge(busy_hang_s=40)
    r0, r1 = Rank(0), Rank(1, where=COMPUTE)
    play(j, [r0, r1], 10)
    r0.stall(enter=True)
    r1.stall(enter=False)  # busy in augment_batch: a slow step, not yet a hang
    assert [e for e in play(j, [r0, r1], 25, start=10) if e["kind"] == "hang"] == []
    (hang,) = [e for e in play(j, [r0, r1], 30, start=35) if e["kind"] == "hang"]
    assert hang["ranks"] == [1] and hang["seq"] == 11 and hang["t"] >= 10 + 40


def test_every_rank_in_the_collective_and_none_completing_waits_for_busy_hang_s():
    """NCCL enqueues a bucket's all_reduce behind the backward kernels: a long GPU step looks like this."""
    j = Judge(busy_hang_s=60)
    rs = [Rank(0), Rank(1)]
    play(j, rs, 10)
    for r in rs:
        r.stall(enter=True)
    assert [e for e in play(j, rs, 50, start=10) if e["kind"] == "hang"] == []
    (hang,) = [e for e in play(j, rs, 30, start=60) if e["kind"] == "hang"]
    assert hang["ranks"] == [] and hang["seq"] == 11 and "every rank entered collective #11" in hang["detail"]


def test_a_stopped_rank_is_judged_by_the_last_numbers_it_gave():
    j = Judge()
    r0, r1 = Rank(0), Rank(1)
    play(j, [r0, r1], 10)
    r0.stall(enter=True)
    r1.stall(enter=False)
    r1.answers, r1.state, r1.busy = False, "T", 0.0
    (hang,) = [e for e in play(j, [r0, r1], 15, start=10) if e["kind"] == "hang"]
    assert hang["ranks"] == [1] and hang["seq"] == 11
    assert hang["detail"].endswith(": stopped (state T: SIGSTOP or a debugger)")


def test_no_numbers_for_one_rank_is_no_opinion():
    """A rank whose server never answered: nothing says it did not enter; the judgement from /proc stands
    (here: every main thread busy, so no hang)."""
    j = Judge()
    r0, r1 = Rank(0), Rank(1)
    r1.answers = False
    play(j, [r0, r1], 10)
    r0.stall(enter=True)
    r1.stall(enter=False)
    assert [e for e in play(j, [r0, r1], 30, start=10) if e["kind"] == "hang"] == []


def test_numbers_that_moved_are_moved_and_the_checks_of_another_nodes_numbers():
    polls = [(0.0, {"0": {"enq": 5, "done": 5}}), (2.0, {"0": {"enq": 6, "done": 6}})]
    assert seqjudge.state(polls, 2.0, 2.0).kind == "moved"
    assert seqjudge.state(polls, 20.0, 2.0) is None  # not fresh
    assert seqjudge.clean({"0": {"enq": "5", "done": 5}, 3: {}, "1": {"enq": 2, "done": 1, "op": 7}}) == \
        {"1": {"enq": 2, "done": 1, "op": None}}
    assert seqjudge.clean(["not", "a", "mapping"]) is None
    j = Judge()
    o = Rank(0).obs(0)
    o["seq"] = {"pgs": "garbage"}
    j.feed([o], 0.0)
    assert not j.ranks[("n1", 100)].seqs


def test_a_change_between_polls_far_apart_says_nothing_of_the_last_seconds():
    """The CPU recorder is read every 30 s while all moves: numbers that changed between two polls 30 s
    apart may have stopped changing 25 s ago (a rank that fell asleep): not "moved"."""
    a, b = {"0": {"enq": 170, "done": 170}}, {"0": {"enq": 250, "done": 249}}
    assert seqjudge.state([(0.0, a), (30.0, b)], 30.0, 6.0) is None
    st = seqjudge.state([(0.0, a), (30.0, b), (32.0, b), (34.0, b), (36.0, b)], 36.0, 6.0)
    assert st.kind == "waiting" and (st.pg, st.seq, st.since) == ("0", 250, 30.0)
    assert seqjudge.state([(30.0, a), (32.0, b)], 36.0, 6.0).kind == "moved"
