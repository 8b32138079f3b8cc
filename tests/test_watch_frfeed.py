"""watch's flight-recorder feed (watch/frfeed.py) on the real dump formats: the H100 NCCL timeout's dump and
the 4-rank Gloo job's (tests/flightrec/), appearing in the armed folder while watch looks."""
from __future__ import annotations

import os
import shutil
import time

from ddpdoctor.watch import frfeed
from test_explain_watch_events import GLOO, NCCL, gloo_dumps_where_rank2_skipped_collective_4


def feed_on(d, world):
    return frfeed.FrFeed([os.path.join(d, "fr_rank")], world=world, since=time.time() - 1)


def test_a_gloo_rank_that_never_entered_the_collective_is_named_with_its_seq(tmp_path):
    f = feed_on(str(tmp_path), 4)
    assert f.poll(0.0) == []  # nothing dumped yet
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    (e,) = f.poll(10.0)
    assert (e["ranks"], e["seq"], e["collective"], e["pg"], e["source"]) == ([2], 4, "all_reduce", "0", "flight recorder")
    assert e["waiting"]["ranks"] == [0, 1, 3] and "never entered collective #4 all_reduce" in e["detail"]
    assert f.poll(20.0) == [] and f.poll(30.0, final=True) == []  # said once
    assert f.seqs() == {0: 4, 1: 4, 2: 3, 3: 4}


def test_a_gloo_rank_calling_barrier_where_the_others_all_reduce_is_the_origin(tmp_path):
    for r in range(4):
        shutil.copy(os.path.join(GLOO, f"fr_rank{r}"), tmp_path / f"fr_rank{r}")
    (e,) = feed_on(str(tmp_path), 4).poll(10.0)
    assert e["ranks"] == [2] and e["status"] == "mismatch" and "called barrier at collective #4" in e["detail"]


def test_the_nccl_timeout_dump_names_the_stuck_collective_and_seq(tmp_path):
    shutil.copy(os.path.join(NCCL, "fr_rank0"), tmp_path / "fr_rank0")
    (e,) = feed_on(str(tmp_path), 1).poll(10.0)
    assert (e["status"], e["seq"], e["collective"], e["ranks"]) == ("stuck", 5, "all_reduce", [])
    assert "none completed it" in e["detail"]


def test_dumps_older_than_the_watch_are_not_this_hang(tmp_path):
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    for r in range(4):
        os.utime(tmp_path / f"fr_rank{r}", (time.time() - 3600,) * 2)
    assert feed_on(str(tmp_path), 4).poll(10.0, final=True) == []


def test_some_ranks_dumped_waits_to_settle_before_judging(tmp_path):
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    os.unlink(tmp_path / "fr_rank3")
    f = feed_on(str(tmp_path), 4)
    assert f.poll(10.0) == []  # 3 of 4: another may still be writing
    assert f.poll(10.0 + frfeed.SETTLE_S + frfeed.POLL_S)[0]["ranks"] == [2]


def test_the_hook_names_the_host_and_pid_watch_sees_for_the_rank(tmp_path):
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    f = feed_on(str(tmp_path), 4)
    obs = [{"rank": r, "host": "node1" if r < 2 else "node2", "pid": 100 + r} for r in range(4)]
    (e,) = frfeed.events(f, 10.0, obs)
    assert e["where"] == [{"rank": 2, "host": "node2", "pid": 102, "where": {}}] and e["hosts"] == ["node2"]
    assert e["t"] == 10.0


def test_a_truncated_dump_is_read_again_later_not_judged(tmp_path):
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    whole = (tmp_path / "fr_rank2").read_bytes()
    (tmp_path / "fr_rank2").write_bytes(whole[: len(whole) // 2])
    f = feed_on(str(tmp_path), 4)
    assert f.poll(10.0) == [] and 2 not in f.dumps
    (tmp_path / "fr_rank2").write_bytes(whole)
    os.utime(tmp_path / "fr_rank2", (time.time() + 1,) * 2)
    assert f.poll(20.0, final=True)[0]["ranks"] == [2]


def test_a_job_that_is_not_armed_has_no_feed():
    class R:
        env = {"RANK": "0"}
        world_size = 2
    assert frfeed.FrFeed.for_ranks([R()]) is None
