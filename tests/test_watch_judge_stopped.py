"""watch/judge.py: when every rank is stopped nobody waits in a collective, yet the job cannot move (a
one-rank job under SIGSTOP or a debugger, as on a one-GPU machine): that is a hang, and it recovers on SIGCONT."""
from __future__ import annotations

from test_watch_judge import COMPUTE, Rank, play

from ddpdoctor.render.watch import line
from ddpdoctor.watch.judge import Judge


def test_a_one_rank_job_that_is_stopped_hangs_and_recovers_when_continued():
    j, r0 = Judge(), Rank(0, busy=0.8, where=COMPUTE)
    assert play(j, [r0], 20) == []
    r0.state, r0.busy = "T", 0.0
    events = play(j, [r0], 20, start=20)
    assert [e["kind"] for e in events] == ["hang"]
    assert events[0]["ranks"] == [0] and events[0]["detail"].startswith("stopped")
    assert events[0]["t"] - 20 <= 15
    assert "None" not in line({**events[0], "wall": 0.0}) and "no rank can move" in line({**events[0], "wall": 0.0})
    r0.state, r0.busy = "R", 0.8
    assert [e["kind"] for e in play(j, [r0], 10, start=40)] == ["recovered"]


def test_a_one_rank_job_sleeping_in_user_code_is_not_called_stopped():
    r0 = Rank(0, busy=0.0, where={**COMPUTE, "call": "sleep"})
    assert play(Judge(), [r0], 60) == []
