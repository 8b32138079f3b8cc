"""Order and confidence of `explain --log` answers the log does not decide (issue 23): the failure that came first
goes before what it left the other ranks with, torch's "failed or timed out" line announces the error printed after
it, and a first answer below render.LOW is named or not by what the collected threads found (calibration.py).

The log lines are torch's own templates: ProcessGroupNCCL.cpp (WorkNCCL::handleException, the watchdog timeout,
the C10D_NCCL_CHECK message `NCCL error in: <file>:<line>, <ncclGetErrorString>, NCCL version <v>`)."""
import io
import sys
from pathlib import Path

import pytest

from ddpdoctor.logscan import calibration, explain_stream
from ddpdoctor.logscan.render import LOW, SHOW_FULL, render_text

ROOT = Path(__file__).resolve().parents[1]

WATCHDOG = ("[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
            "milliseconds before timing out.")
NCCL_ERROR = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/home/u/train.py", line 40, in <module>',
    "[rank1]:     dist.all_reduce(t)",
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
    "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
]
# handleException logs its line, then rethrows: the terminate handler prints the exception's own text after it
# (a torch 1.10-1.13 job, as users paste it)
ANNOUNCED = [
    "[E ProcessGroupNCCL.cpp:414] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA "
    "kernels, subsequent GPU operations might run on corrupted/incomplete data. To avoid this inconsistency, we are "
    "taking the entire process down.",
    "terminate called after throwing an instance of 'std::runtime_error'",
    "  what():  NCCL error: unhandled system error, NCCL version 2.10.3",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. It can be also "
    "caused by unexpected exit of a remote peer, you can check NCCL warnings for failure reason and see if there is "
    "connection closure by a peer.",
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 518 closing signal SIGTERM",
]
INTERNAL = [
    '[rank1]:   File "/home/u/train.py", line 31, in <module>',
    "[rank1]:     model = DDP(model, device_ids=[local_rank])",
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
    "internal error - please report this issue to the NCCL developers, NCCL version 2.18.1",
    "[rank1]: ncclInternalError: Internal check failed.",
]


def explain(lines):
    return explain_stream(io.BytesIO("\n".join(lines).encode()), "t.log")


def ids(ex):
    return [d.failure.id for d in ex.diagnoses]


def test_the_failed_or_timed_out_line_before_an_nccl_error_announces_that_error_not_a_timeout():
    ex = explain(ANNOUNCED)
    assert ids(ex)[0] == "NCCL_SYSTEM_ERROR"
    assert "NCCL_COLLECTIVE_TIMEOUT" not in ids(ex)


def test_the_same_line_beside_a_watchdog_timeout_is_the_timeouts_evidence():
    ex = explain([WATCHDOG.format(r=0), ANNOUNCED[0]])
    top = ex.diagnoses[0]
    assert top.failure.id == "NCCL_COLLECTIVE_TIMEOUT"
    assert {e.line for e in top.evidence} == {1, 2}


def test_the_failed_or_timed_out_line_alone_stays_a_collective_failure():
    assert ids(explain(ANNOUNCED[:1]))[0] == "NCCL_COLLECTIVE_TIMEOUT"


def test_an_nccl_error_on_one_rank_before_the_others_time_out_goes_first_and_the_timeouts_are_its_consequence():
    ex = explain(NCCL_ERROR + [WATCHDOG.format(r=r) for r in (0, 2, 3)])
    first = ex.diagnoses[0]
    assert first.failure.id == "NCCL_SYSTEM_ERROR" and first.origin == {"rank": 1}
    timeout = next(d for d in ex.diagnoses if d.failure.id == "NCCL_COLLECTIVE_TIMEOUT")
    assert timeout.consequence_of == "NCCL_SYSTEM_ERROR" and timeout.confidence < first.confidence
    assert "after NCCL_SYSTEM_ERROR's first error (line 4)" in timeout.notes[0]
    assert "a consequence of NCCL_SYSTEM_ERROR" in render_text(ex)


def test_timeouts_before_an_nccl_error_stay_first():
    # the watchdog aborts the communicator after its timeout, and the next NCCL call fails: the error is the echo
    ex = explain([WATCHDOG.format(r=r) for r in (0, 2, 3)] + NCCL_ERROR)
    assert ids(ex)[0] == "NCCL_COLLECTIVE_TIMEOUT"
    assert ex.diagnoses[0].consequence_of is None


def test_an_nccl_internal_error_alone_is_named_or_hidden_as_the_threads_counted_lean(monkeypatch):
    # today's dev count: every thread whose log rested on `internal error` alone found nothing behind it (the
    # consequence-mode labelling rule, tests/corpus/README.md): named, low confidence, what the log shows, not why
    right, unknown, other = calibration.TALLY[("NCCL_SYSTEM_ERROR", "NCCL_INTERNAL_ERROR", True)]
    assert right - unknown >= calibration.MARGIN
    ex = explain(INTERNAL)
    top = ex.diagnoses[0]
    assert top.failure.id == "NCCL_SYSTEM_ERROR" and SHOW_FULL <= top.confidence < LOW
    # counts leaning to UNKNOWN hide it, and the log gets the candidates instead, each with what decides it
    monkeypatch.setattr(calibration, "TALLY", {("NCCL_SYSTEM_ERROR", "NCCL_INTERNAL_ERROR", True): (0, 3, 0)})
    ex = explain(INTERNAL)
    assert ex.diagnoses and ex.diagnoses[0].failure.id == "NCCL_SYSTEM_ERROR"
    assert all(d.confidence < SHOW_FULL for d in ex.diagnoses)
    assert [d.failure.id for d in ex.diagnoses] == sorted(
        ids(ex), key=lambda f: -next(d.confidence for d in ex.diagnoses if d.failure.id == f))
    text = render_text(ex)
    assert "No line in this log points clearly at a cause; possible:" in text
    assert "candidate: NCCL_SYSTEM_ERROR" in text and "candidate: NCCL_SHM_TOO_SMALL" in text
    assert "3 found no cause and 0 found this one" in text


def test_an_unhandled_system_error_alone_is_still_named_with_low_confidence():
    ex = explain(NCCL_ERROR)
    top = ex.diagnoses[0]
    assert top.failure.id == "NCCL_SYSTEM_ERROR" and SHOW_FULL <= top.confidence < LOW


@pytest.mark.parametrize("counts, expect", [((1, 3, 0), "hidden"), ((2, 3, 4), "kept"), ((3, 2, 0), "kept")])
def test_a_first_answer_is_hidden_only_when_the_threads_lean_two_logs_or_more_to_unknown(monkeypatch, counts, expect):
    before = explain(NCCL_ERROR).diagnoses[0].confidence
    monkeypatch.setattr(calibration, "TALLY", {("NCCL_SYSTEM_ERROR", "NCCL_SYSTEM_ERROR", True): counts})
    after = explain(NCCL_ERROR).diagnoses[0].confidence
    assert (after < SHOW_FULL <= before) if expect == "hidden" else after == before


def test_a_first_answer_the_threads_lean_to_is_named_at_the_threshold(monkeypatch):
    refused = ["ConnectionRefusedError: [Errno 111] Connection refused"]
    top = explain(refused).diagnoses[0]
    assert (top.failure.id, top.basis) == ("RDZV_ENDPOINT_UNREACHABLE", calibration.RULE) and top.confidence < SHOW_FULL
    monkeypatch.setattr(calibration, "TALLY", {("RDZV_ENDPOINT_UNREACHABLE", calibration.RULE, False): (3, 1, 0)})
    top = explain(refused).diagnoses[0]
    assert top.confidence == SHOW_FULL and "3 found this cause and 1 found none" in top.notes[-1]


def test_a_count_names_a_ceilinged_mode_only_as_the_first_answer_and_only_at_the_naming_level(monkeypatch):
    crash = ["ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 0 (pid: 82397) "
             "of binary: /usr/bin/python3"]
    monkeypatch.setattr(calibration, "TALLY", {("WORKER_NATIVE_CRASH", "TORCHRUN_FAILED_NATIVE_SIGNAL", False): (9, 0, 0)})
    top = explain(crash).diagnoses[0]
    assert top.failure.id == "WORKER_NATIVE_CRASH" and top.failure.ceiling < top.confidence == SHOW_FULL < LOW
    assert any("what the log shows, not why" in n for n in top.notes), top.notes
    # behind a specific cause the same line stays a weak pointer under its ceiling: the count lifts no second answer
    ex = explain(["[rank1]: RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                  "multiprocessing, you must use the 'spawn' start method"] + crash)
    assert ex.diagnoses[0].failure.id == "CUDA_REINIT_IN_FORKED_SUBPROCESS"
    crash_d = [d for d in ex.diagnoses if d.failure.id == "WORKER_NATIVE_CRASH"]
    assert all(d.confidence <= d.failure.ceiling for d in crash_d), crash_d


def test_a_lean_counts_only_among_answers_the_ranker_named_alike(monkeypatch):
    # the same line named elsewhere: its counts do not lift a reading the ranker kept unnamed on purpose
    refused = ["ConnectionRefusedError: [Errno 111] Connection refused"]
    monkeypatch.setattr(calibration, "TALLY", {("RDZV_ENDPOINT_UNREACHABLE", calibration.RULE, True): (9, 0, 0)})
    assert explain(refused).diagnoses[0].confidence < SHOW_FULL
    # nor do a named reading's counts hide one the ranker kept unnamed further
    crash = ["ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 0 (pid: 82397) "
             "of binary: /usr/bin/python3"]
    before = explain(crash).diagnoses[0].confidence
    monkeypatch.setattr(calibration, "TALLY", {("WORKER_NATIVE_CRASH", "TORCHRUN_FAILED_NATIVE_SIGNAL", False): (0, 9, 0)})
    assert explain(crash).diagnoses[0].confidence == before


NO_ROUTE = ("torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of "
            "(192.168.121.122, 1040). The client socket has failed to connect to [trainer-1]:1040 (errno: 113 - No "
            "route to host).")
NO_ROUTE_KEY = ("FIREWALL_BLOCKS_PORTS", "NO_ROUTE_TO_HOST", "RDZV_ENDPOINT_UNREACHABLE")


def test_no_route_to_host_at_the_store_reads_first_as_an_address_nothing_routes_to_then_a_firewall():
    first, second, *_ = explain([NO_ROUTE]).diagnoses
    assert (first.failure.id, second.failure.id) == ("RDZV_ENDPOINT_UNREACHABLE", "FIREWALL_BLOCKS_PORTS")
    assert SHOW_FULL <= first.confidence < LOW and second.confidence < first.confidence
    as_firewall, as_address = calibration.ORDER[NO_ROUTE_KEY]
    assert f"{as_address} found this cause and {as_firewall} found FIREWALL_BLOCKS_PORTS" in first.notes[-1]


@pytest.mark.parametrize("counts, swapped", [((0, 2), True), ((1, 2), False), ((2, 0), False)])
def test_two_readings_of_one_line_change_places_only_on_a_lean_of_two_logs(monkeypatch, counts, swapped):
    monkeypatch.setattr(calibration, "ORDER", {NO_ROUTE_KEY: counts})
    first = explain([NO_ROUTE]).diagnoses[0].failure.id
    assert first == ("RDZV_ENDPOINT_UNREACHABLE" if swapped else "FIREWALL_BLOCKS_PORTS")


def test_the_tally_decides_what_the_dev_split_counts_today():
    # merged rules move which mode comes first on some logs: when a decision the table holds no longer follows from
    # a fresh count (or a fresh count decides a key the table lacks), rerun benchmarks/calibrate_explain.py --python
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from calibrate_explain import order_tally, tally
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    fresh = {k: tuple(v) for k, v in tally().items() if sum(v) >= 2}
    decided = {k: calibration.decision(k, fresh) for k in fresh if calibration.decision(k, fresh)}
    assert decided == {k: calibration.decision(k) for k in calibration.TALLY if calibration.decision(k)}
    fresh_order = order_tally()
    assert ({k for k in fresh_order if calibration.swap(k, fresh_order)} ==
            {k for k in calibration.ORDER if calibration.swap(k)})


# Several logs (explain --log a --log b, logscan/joint.py): the log that failed first holds the cause.
GLOG_WATCHDOG = ("[rank{r}]:[E1112 {t} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
                 "timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                 "600012 milliseconds before timing out.")
GLOG_NCCL_ERROR = ("[rank2]:[E1112 {t} ProcessGroupNCCL.cpp:1537] [PG 0 Rank 2] Process group watchdog thread terminated "
                   "with exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
                   "version 2.21.5")


def named(source, lines):
    return explain_stream(io.BytesIO("\n".join(lines).encode()), source)


def judge(*exs):
    from ddpdoctor.logscan import joint
    return joint.judge(list(exs))


def test_of_two_logs_that_disagree_the_one_that_failed_first_by_its_timestamps_holds_the_cause():
    timeouts = named("node0.log", [GLOG_WATCHDOG.format(r=0, t="23:44:28.613510957")])
    error = named("node1.log", [GLOG_NCCL_ERROR.format(t="23:34:10.100000000")])
    j = judge(timeouts, error)
    assert j.confidence == "medium" and j.failure == "NCCL_SYSTEM_ERROR"
    assert j.conclusion.startswith("the first failure is in node1.log: NCCL_SYSTEM_ERROR")
    assert "618.5 s before" in j.conclusion


@pytest.mark.parametrize("t_error, first", [("23:44:28.113510957", None), ("23:54:28.613510957", "node0.log")])
def test_timestamps_under_a_second_apart_decide_nothing_and_a_later_error_is_not_the_cause(t_error, first):
    j = judge(named("node0.log", [GLOG_WATCHDOG.format(r=0, t="23:44:28.613510957")]),
              named("node1.log", [GLOG_NCCL_ERROR.format(t=t_error)]))
    if first is None:
        assert j.confidence == "unknown" and "which failed first decides" in j.conclusion
    else:
        assert j.failure == "NCCL_COLLECTIVE_TIMEOUT" and f"the first failure is in {first}" in j.conclusion


def test_timestamps_of_different_formats_are_not_compared():
    dated = GLOG_NCCL_ERROR.replace("E1112 23:34:10.100000000", "2024-11-12 23:34:10,100")
    j = judge(named("node0.log", [GLOG_WATCHDOG.format(r=0, t="23:44:28.613510957")]), named("node1.log", [dated]))
    assert j.confidence == "unknown"


def test_one_log_naming_a_consequence_beside_a_silent_log_is_not_every_log_agreeing():
    j = judge(named("node0.log", [GLOG_WATCHDOG.format(r=0, t="23:44:28.613510957")]),
              named("node1.log", ["step 100 loss 1.2"]))
    assert "every log" not in j.conclusion and j.confidence == "unknown" and j.failure == ""
    assert "its cause may be in the first error of node1.log" in j.conclusion
