"""facts/progress.py and inspect's rank states for a CUDA rank whose main thread spins at one line: its CPU time
all in the CUDA driver (perf samples, inspect/sample.py) is a wait on its GPU, not computing."""
from __future__ import annotations

from ddpdoctor.checks import inspect as J
from ddpdoctor.facts import progress as P
from ddpdoctor.facts.inspect import RankView


def motion(seconds=1.0, driver=(950, 0), cpu=0.99, changed=False, coll=False):
    return P.Motion(seconds, changed, coll, cpu, 0, 0.0, None, driver)


def test_one_second_in_the_driver_at_one_line_is_unknown_with_what_decides():
    p = P.judge(motion())
    assert p.verdict == P.UNKNOWN and "spins in the CUDA driver" in p.why and "waits on its GPU" in p.why
    assert p.decide.startswith("inspect with --interval 6")


def test_six_seconds_in_the_driver_at_one_line_is_still():
    p = P.judge(motion(seconds=6.2, driver=(5800, 0)))
    assert p.verdict == P.STILL and "waits on its GPU" in p.why


def test_a_few_samples_outside_the_driver_is_a_loop_that_computes_between_syncs():
    assert P.judge(motion(driver=(900, 4))).verdict == P.MOVING
    assert P.judge(motion(driver=(20, 0))).verdict == P.MOVING   # too few samples to say
    assert P.judge(motion(driver=None)).verdict == P.MOVING       # no perf here: as before
    assert P.judge(motion(changed=True)).verdict == P.MOVING


def test_inspect_reads_the_driver_samples_into_the_rank_state():
    w = {"kind": "python", "call": "train_step", "file": "train.py", "line": 42, "func": "train_step", "active": True}
    sig = [["train_step", "train.py", 42]]
    d = {"rank": 0, "pid": 1000, "host": "n1", "world_size": 2, "state": "R", "main_thread_cpu": 0.99,
         "main_wakeups": 0, "syscalls_per_s": 0.0, "seconds": 6.5, "env": {},
         "samples": [{"ok": True, "kind": "", "error": "", "where": w, "signature": sig}] * 2,
         "gpu_driver": {"driver": 6300, "other": 0}}
    st = J.classify(RankView.from_dict(d))
    assert st.state == "stuck" and "waits on its GPU" in st.why
    st = J.classify(RankView.from_dict({**d, "gpu_driver": {"driver": 6000, "other": 300}}))
    assert st.state == "progressing"
