"""facts/progress.py: progress judged by counters that move, never by two stacks that look alike."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ddpdoctor.facts import progress as P

SIG = (("all_reduce", "torch/distributed/distributed_c10d.py", 2800), ("<module>", "train.py", 12))


def motion(**kw):
    base = dict(seconds=1.0, stack_changed=False, in_collective=True, main_cpu=0.0, wakeups=0, syscalls_per_s=0.0)
    return P.Motion(**{**base, **kw})


def test_a_tight_loop_of_small_all_reduces_is_moving_though_every_sample_lands_in_the_collective():
    p = P.judge(motion(main_cpu=0.12, wakeups=412, syscalls_per_s=1650.0))
    assert p.verdict == P.MOVING and "woke 412 times" in p.why


def test_a_rank_blocked_in_a_collective_is_still_when_every_counter_was_read_and_none_moved():
    p = P.judge(motion())
    assert (p.verdict, p.why) == (P.STILL, "same stack in both samples, 0% CPU, its main thread never woke")


def test_a_large_collective_that_blocks_the_main_thread_moves_data():
    assert P.judge(motion(wakeups=0, syscalls_per_s=300.0)).verdict == P.MOVING


def test_completed_collectives_from_the_flight_recorder_are_progress():
    assert P.judge(motion(collectives=37)).verdict == P.MOVING


def test_weak_evidence_is_unknown_with_what_would_decide():
    for m in (motion(main_cpu=None, wakeups=None, syscalls_per_s=None), motion(stack_changed=None),
              motion(main_cpu=1.0), motion(seconds=0.1)):
        p = P.judge(m)
        assert p.verdict == P.UNKNOWN and p.decide, m


def test_computing_at_one_line_outside_a_collective_is_moving():
    assert P.judge(motion(in_collective=False, main_cpu=0.97)).verdict == P.MOVING


def test_between_two_looks_counts_what_moved():
    a = P.Look(10.0, SIG, True, main_ticks=100, wakeups=50, syscalls=1000, seq=7)
    b = P.Look(12.0, SIG, True, main_ticks=120, wakeups=450, syscalls=3000, seq=9)
    m = P.between(a, b, hz=100)
    assert (m.seconds, m.stack_changed, m.main_cpu, m.wakeups, m.syscalls_per_s, m.collectives) == (
        2.0, False, 0.1, 400, 1000.0, 2)


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_look_reads_a_real_process_whose_main_thread_wakes():
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    try:
        time.sleep(0.3)
        a = P.look(child.pid, signature=SIG, in_collective=False)
        time.sleep(0.5)
        b = P.look(child.pid, signature=SIG, in_collective=False)
        m = P.between(a, b)
        assert m.wakeups is not None and m.wakeups >= 10, m  # 0.01 s sleeps: ~50 wakeups
        assert P.judge(m).verdict == P.MOVING
        idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            time.sleep(0.5)
            a = P.look(idle.pid, signature=SIG, in_collective=False)
            time.sleep(0.6)
            b = P.look(idle.pid, signature=SIG, in_collective=False)
            assert P.judge(P.between(a, b)).verdict == P.STILL
        finally:
            idle.kill()
            idle.wait()
    finally:
        child.kill()
        child.wait()
