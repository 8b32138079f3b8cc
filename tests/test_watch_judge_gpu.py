"""watch/judge.py with ranks that wait on their GPU: their main thread spins (busy time grows) at one Python
line while its CPU time is all in the CUDA driver (watch/gpuwait.py confirms it on the node and sends
`gpu`). Each test plays ticks (one a second) of rank observations as watch/observe.py produces them.
"""
from __future__ import annotations

from ddpdoctor.render.watch import line
from ddpdoctor.watch.judge import ALL_GPU_S, Judge

ALLREDUCE = {"kind": "collective", "call": "all_reduce", "file": "train.py", "line": 72, "func": "train_step"}
ITEM = {"kind": "python", "call": "train_step", "file": "train.py", "line": 42, "func": "train_step"}
FORWARD = {"kind": "python", "call": "forward", "file": "model.py", "line": 17, "func": "forward"}
SLEEP = {"kind": "python", "call": "sleep", "file": "train.py", "line": 67, "func": "train_step"}


class Rank:
    def __init__(self, rank, busy=0.9, where=ITEM, sig="a"):
        self.rank, self.pid, self.busy, self.where, self.sig = rank, 100 + rank, busy, where, sig
        self.run_ns = 0
        self.gpu_since = None   # the node confirmed a GPU wait at this tick

    def obs(self, t):
        self.run_ns += int(self.busy * 1e9)
        o = {"rank": self.rank, "host": "n1", "pid": self.pid, "world_size": None, "state": "R" if self.busy else "S",
             "run_ns": self.run_ns, "delay_ns": 0, "io": 0,
             "stack": {"ok": True, "where": self.where, "sig": self.sig, "active": self.busy > 0}}
        if self.gpu_since is not None and t >= self.gpu_since:
            o["gpu"] = {"lib": "libcuda.so.1", "held_s": float(t - self.gpu_since + 6), "samples": 4000,
                        "how": "perf"}
        return o


def play(judge, ranks, seconds, start=0):
    events = []
    for t in range(start, start + seconds):
        events += judge.feed([r.obs(t) for r in ranks], float(t))
    return events


def healthy(j, ranks, seconds=20):
    for i in range(seconds):
        for r in ranks:
            r.sig = f"{r.rank}-{i % 3}"   # the loop's stack changes between samples
        j.feed([r.obs(i) for r in ranks], float(i))


def test_a_rank_waiting_on_its_gpu_while_the_other_waits_in_gloo_is_the_origin():
    j, r0, r1 = Judge(), Rank(0), Rank(1, busy=0.2, where=ALLREDUCE)
    healthy(j, [r0, r1])
    r0.sig, r1.sig, r1.busy = "stuck", "coll", 0.0
    r0.gpu_since = 28   # the node's confirmation: the stack unchanged 6 s, the CPU in libcuda.so.1
    (e,) = [e for e in play(j, [r0, r1], 15, start=20) if e["kind"] == "hang"]
    assert e["t"] <= 30 and e["ranks"] == [0]
    assert e["detail"].startswith("waits on its GPU for 6 s: its main thread spins in libcuda.so.1 at one line")
    assert e["waiting"] == {"ranks": [1], "call": "all_reduce", "at": "train.py:72"}
    assert e["gpu_wait"] == [{"rank": 0, "host": "n1", "pid": 100, "at": "train_step train.py:42",
                              "lib": "libcuda.so.1", "held_s": 6.0, "how": "perf"}]
    assert "hang: rank 0 on n1 (pid 100)" in line({**e, "wall": 0})


def test_without_the_nodes_confirmation_the_spinning_rank_is_moving_as_before():
    j, r0, r1 = Judge(), Rank(0), Rank(1, busy=0.2, where=ALLREDUCE)
    healthy(j, [r0, r1])
    r0.sig, r1.sig, r1.busy = "stuck", "coll", 0.0   # a long GPU step, never confirmed as a wait
    assert [e for e in play(j, [r0, r1], 60, start=20) if e["kind"] == "hang"] == []


def test_a_rank_sleeping_in_user_code_stays_the_origin_and_the_gpu_waiter_is_said():
    j, r0, r1 = Judge(), Rank(0), Rank(1, busy=0.2, where=ALLREDUCE)
    healthy(j, [r0, r1])
    r0.sig, r0.gpu_since = "stuck", 27   # its NCCL collective returned; it blocks at its next sync
    r1.sig, r1.busy, r1.where = "sleep", 0.0, SLEEP
    (e,) = [e for e in play(j, [r0, r1], 15, start=20) if e["kind"] == "hang"]
    assert e["ranks"] == [1] and e["detail"].startswith("in user code, not in a collective; rank 0 waits on its GPU "
                                                       "(libcuda.so.1 at train_step train.py:42)")
    assert [g["rank"] for g in e["gpu_wait"]] == [0]


def test_every_rank_waiting_on_its_gpu_is_a_low_confidence_hang_after_a_longer_look():
    j = Judge()
    ranks = [Rank(0), Rank(1), Rank(2)]
    healthy(j, ranks)
    for r in ranks:
        r.sig, r.gpu_since = "stuck", 26
    ev = [e for e in play(j, ranks, 20, start=20) if e["kind"] == "hang"]
    (e,) = ev
    assert e["t"] - 26 + 6 >= ALL_GPU_S   # held_s reached the longer look, not before
    assert e["ranks"] == [] and e["confidence"] == "low"
    assert e["detail"] == ("every rank waits on its GPU for 8 s: an NCCL collective that does not complete (a peer "
                           "or the network) or a kernel that does not end; decide with the flight recorder: "
                           "ddpdoctor arm / explain --fr")
    assert [g["rank"] for g in e["gpu_wait"]] == [0, 1, 2]
    assert line({**e, "wall": 0}).startswith("00:00:00 (low confidence) hang: ranks 0,1,2 wait in train_step at "
                                             "train.py:42; origin every rank waits on its GPU")


def test_a_gpu_bound_loop_at_the_same_item_line_most_samples_is_no_hang():
    j = Judge()
    ranks = [Rank(0), Rank(1)]
    for t in range(120):   # mostly the same line, but a different sample now and then: it moves
        for r in ranks:
            r.sig = "item" if t % 7 else f"other{t}"
        assert j.feed([r.obs(t) for r in ranks], float(t)) == []


def test_the_gpu_wait_ending_is_a_recovery():
    j, r0, r1 = Judge(), Rank(0), Rank(1, busy=0.2, where=ALLREDUCE)
    healthy(j, [r0, r1])
    r0.sig, r1.sig, r1.busy, r0.gpu_since = "stuck", "coll", 0.0, 28
    assert [e["kind"] for e in play(j, [r0, r1], 15, start=20)] == ["hang"]
    r0.gpu_since, r1.busy = None, 0.3   # the kernel ended: the node's confirmation stops, both move
    healthy_after = []
    for i in range(35, 45):
        for r in (r0, r1):
            r.sig = f"{r.rank}-{i % 3}"
        healthy_after += j.feed([r.obs(i) for r in (r0, r1)], float(i))
    assert [e["kind"] for e in healthy_after] == ["recovered"]
