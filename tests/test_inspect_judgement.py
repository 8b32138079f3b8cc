"""DD510-DD514 judge plain facts (the shape ddpdoctor/inspect/sample.py gathers): who is odd, stuck, gone."""
from __future__ import annotations

from ddpdoctor.checks import inspect as J
from ddpdoctor.checks import inspect_gpu as G
from ddpdoctor.facts.inspect import InspectContext, RankView
from ddpdoctor.model import Severity


def where(call, file, line, kind="collective", func="<module>"):
    return {"kind": kind, "call": call, "file": file, "line": line, "func": func, "active": False}


def rec(rank, w, *, moved=False, cpu=0.0, state="S", local_rank=None, lws=None, world=4, kinds=("", "")):
    sig = [["f", "x.py", w["line"] if w else 0]]
    samples = []
    for i, k in enumerate(kinds):
        ok = k == ""
        samples.append({"ok": ok, "kind": k, "error": "" if ok else f"{k} error", "where": w if ok else None,
                        "signature": (sig + [[str(i)]] if moved else sig) if ok else None})
    env = {"LOCAL_WORLD_SIZE": str(lws)} if lws else {}
    return {"rank": rank, "pid": 1000 + rank, "host": "n1", "local_rank": rank if local_rank is None else local_rank,
            "world_size": world, "state": state, "main_thread_cpu": cpu, "env": env, "samples": samples}


def ctx(*recs, interval=1.0, nvml=None, ns=False):
    return InspectContext.of(recs, host="n1", interval=interval, nvml=nvml or {}, pid_namespace_differs=ns)


AR = where("all_reduce", "train.py", 80)
BC = where("broadcast", "train.py", 57)


def test_the_rank_in_another_collective_is_named_with_both_lines():
    c = ctx(*(rec(r, AR) for r in (0, 1, 2, 3, 4, 6, 7)), rec(5, BC), )
    (f,) = J.ranks_agree_on_collective(c)
    assert f.message == "rank 5 in broadcast at train.py:57 while 7 ranks wait in all_reduce at train.py:80"
    assert f.severity is Severity.ERROR


def test_ranks_that_agree_give_no_finding_from_dd510():
    assert list(J.ranks_agree_on_collective(ctx(rec(0, AR), rec(1, AR)))) == []


def test_a_rank_outside_any_collective_is_named_while_others_wait():
    sleeping = where("sleep", "train.py", 42, kind="python", func="step")
    (f,) = J.ranks_not_in_collective(ctx(rec(0, AR), rec(1, sleeping), rec(2, AR)))
    assert f.message == "rank 1 in step at train.py:42 (not in a collective) while 2 ranks wait in all_reduce at train.py:80"


def test_a_computing_rank_at_one_line_is_progress_not_stuck():
    busy = where("matmul", "train.py", 42, kind="python")
    assert J.classify(RankView.from_dict(rec(1, busy, cpu=0.95))).state == "progressing"
    assert J.classify(RankView.from_dict(rec(1, busy, cpu=0.01))).state == "stuck"


def test_a_busy_main_thread_in_a_collective_that_never_wakes_is_unknown_not_hung():
    c = ctx(rec(0, AR, cpu=1.0), rec(1, AR, cpu=1.0))
    assert list(J.ranks_agree_on_collective(c)) == []
    (f,) = J.job_makes_progress(c)
    assert f.severity is Severity.WARNING and f.message.startswith("progress unknown for ranks 0,1")
    assert "flight recorder" in f.hint


def test_ranks_whose_main_threads_wake_in_the_same_collective_are_progressing():
    busy = [{**rec(r, AR), "main_wakeups": 300, "syscalls_per_s": 900.0} for r in (0, 1)]
    assert [list(f(ctx(*busy))) for f in (J.ranks_agree_on_collective, J.job_makes_progress)] == [[], []]


def test_a_rank_whose_stack_moves_is_progressing_and_the_job_passes():
    c = ctx(rec(0, AR, moved=True), rec(1, AR, moved=True))
    assert [list(f(c)) for f in (J.ranks_agree_on_collective, J.ranks_not_in_collective, J.job_makes_progress)] == [[], [], []]


def test_all_local_ranks_in_one_collective_point_at_the_other_nodes():
    (f,) = J.job_makes_progress(ctx(rec(0, AR), rec(1, AR), interval=1.0))
    assert f.message.startswith("all 2 ranks on n1 wait in all_reduce at train.py:80")
    assert "ranks 2,3 run elsewhere" in f.message


def test_gone_and_stopped_and_missing_local_ranks():
    c = ctx(rec(0, AR, lws=4), rec(1, AR, lws=4, state="T"), rec(2, None, lws=4, state="gone"))
    msgs = [f.message for f in J.ranks_alive(c)]
    assert msgs == ["rank 1 (pid 1001) is stopped (state T)", "rank 2 (pid 1002) is gone",
                    "local rank 3 (rank 3) is gone: no process of the job has it"]


def test_no_ptrace_rights_is_one_error_that_says_how_to_grant_them():
    c = ctx(rec(0, None, kinds=("permission", "permission")), rec(1, None, kinds=("permission", "permission")))
    (f,) = J.stacks_readable(c)
    assert "ptrace" in f.message and "ptrace_scope" in " ".join(f.fix.commands)


GPUS = [{"index": 0, "uuid": "GPU-a", "processes": [{"pid": 1000, "used": 300 << 20}, {"pid": 1003, "used": 812 << 20}]},
        {"index": 3, "uuid": "GPU-d", "processes": [{"pid": 1003, "used": 900 << 20}]}]


def test_memory_on_another_ranks_gpu_is_named_like_dd401():
    c = ctx(rec(0, AR), rec(3, AR), nvml={"available": True, "gpus": GPUS})
    (f,) = G.running_rank_memory_on_own_gpu(c)
    assert f.message == "rank 3 (pid 1003) holds 812 MiB on GPU 0, its own GPU is 3"
    assert "set_device" in f.fix.code


def test_in_another_pid_namespace_it_says_so_instead_of_guessing():
    gpus = [{"index": 0, "uuid": "GPU-a", "processes": [{"pid": 77001, "used": 1 << 30}]}]
    (f,) = G.running_rank_memory_on_own_gpu(ctx(rec(0, AR), nvml={"available": True, "gpus": gpus}, ns=True))
    assert f.severity is Severity.WARNING and "another pid namespace" in f.message
