"""DD516 / DD517 on what an armed job leaves: real dumps (tests/flightrec/) read through ddpdoctor.flightrec."""
from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.checks import inspect_armed as J
from ddpdoctor.facts.inspect import FlightRecorderView, InspectContext, WatchdogView
from ddpdoctor.inspect import armed
from ddpdoctor.model import Severity
from ddpdoctor.registry import Skip
from ports import free_port

FR = Path(__file__).parent / "flightrec"


def ctx(flightrec=None, watchdog=None):
    return InspectContext.of(flightrec=FlightRecorderView.from_dict(flightrec), watchdog=WatchdogView.from_dict(watchdog))


def test_the_dump_dir_is_the_one_the_ranks_were_started_with():
    ranks = [{"env": {"TORCH_FR_DUMP_TEMP_FILE": "/x/job7/fr_rank_"}}, {"env": {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/y/fr"}},
             {"env": {}}]
    assert armed.dump_dirs(ranks) == ["/x/job7", "/y"]


def test_gloo_dumps_name_the_rank_that_called_another_collective():
    fr = armed.flight_recorder([str(FR / "gloo-barrier-mismatch")])
    (f,) = J.flight_recorder_agrees(ctx(flightrec=fr))
    assert f.severity is Severity.ERROR
    assert f.message == ("flight recorder: at collective #4 (all_reduce) of pg 0 (default_pg) rank 2 called barrier "
                         "while ranks 0,1,3 called all_reduce")
    assert f.evidence["reached"] == {"0": 4, "1": 4, "2": 4, "3": 4}


def test_an_nccl_dump_where_everyone_entered_is_a_warning_not_a_culprit():
    (f,) = J.flight_recorder_agrees(ctx(flightrec=armed.flight_recorder([str(FR / "nccl-fr-timeout")])))
    assert f.severity is Severity.WARNING and "entered collective #5 (all_reduce)" in f.message


def test_an_armed_dir_without_dumps_yet_is_a_skip(tmp_path):
    with pytest.raises(Skip, match="no dump in"):
        list(J.flight_recorder_agrees(ctx(flightrec=armed.flight_recorder([str(tmp_path)]))))


def test_watchdog_lines_of_a_log_are_combined():
    wd = armed.watchdog_lines([str(FR / "nccl-fr-timeout" / "job.log")])
    (f,) = J.watchdog_lines_agree(ctx(watchdog=wd))
    assert f.message == "watchdog: collective #5 (ALLREDUCE) of pg 0 (default_pg) timed out on rank 0, every rank in the log had entered it"


@pytest.mark.torchjob
def test_debug_server_source_says_why_when_there_is_nothing_to_read():
    """--debug-server on a job without one: one line each, never a hang (the live case is in
    tests/test_inspect_torchjob.py; where the URLs come from: tests/test_workerserver_torchjob.py)."""
    import datetime
    import os
    import time

    torch = pytest.importorskip("torch")
    from ddpdoctor.inspect import debugserver
    from ports import rank_standin

    port = free_port()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    fr = debugserver.flight_recorder([{"rank": 0, "pid": os.getpid(), "env": env, "world_size": 2}], timeout=1.0)
    assert fr["error"] == f"no rank runs torch's debug server: no thread named pt_workerserver in rank 0 (pid {os.getpid()})"
    (f,) = J.flight_recorder_agrees(ctx(flightrec=fr))
    assert f.severity is Severity.WARNING and "gave nothing to read" in f.message
    assert "start_debug_server()" in f.fix.summary
    store = torch.distributed.TCPStore("127.0.0.1", port, None, True, timeout=datetime.timedelta(seconds=5),
                                       wait_for_workers=False)
    rank, _ = rank_standin(("AF_INET6", "::"), ("AF_INET6", "::"))  # the thread, and /proc cannot tell the port
    try:
        ranks = [{"rank": 0, "pid": rank.pid, "env": env, "world_size": 2}]
        assert "holds no debug_server/rank<N>" in debugserver.flight_recorder(ranks, timeout=1.0)["error"]
        store.set("debug_server/rank0", "http://127.0.0.1:1")  # registered, but nobody answers there
        assert "rank 0 (http://127.0.0.1:1)" in debugserver.flight_recorder(ranks, timeout=1.0)["error"]
        del store
        t0 = time.monotonic()
        assert "could not be read" in debugserver.flight_recorder(ranks, timeout=1.0)["error"]
        assert time.monotonic() - t0 < 10
    finally:
        rank.kill()
        rank.wait()


def test_gather_judges_dumps_from_node_local_disks_together(tmp_path):
    """Under --gather each node sends its own dumps as data (flightrec.dumps.to_wire); the first node
    judges them together: ranks 0-1 on one node's disk and 2-3 on another's give the same verdict as
    one shared directory, and a rank seen twice counts once."""
    import re
    import shutil
    a, b = tmp_path / "n1", tmp_path / "n2"
    a.mkdir(), b.mkdir()
    for p in sorted((FR / "gloo-barrier-mismatch").iterdir()):
        m = re.search(r"(\d+)$", p.name)
        if m is None:
            continue
        rank = int(m.group(1))
        shutil.copy(p, (a if rank < 2 else b) / p.name)
        if rank == 1:
            shutil.copy(p, b / p.name)  # a rank both nodes see
    fr = armed.gathered_flight_recorder([("n1", armed.node_dumps([str(a)])), ("n2", armed.node_dumps([str(b)]))])
    assert fr["dir"] == "dumps from 2 node(s): n1, n2"
    (f,) = J.flight_recorder_agrees(ctx(flightrec=fr))
    assert f.message == ("flight recorder: at collective #4 (all_reduce) of pg 0 (default_pg) rank 2 called barrier "
                         "while ranks 0,1,3 called all_reduce")
    assert armed.gathered_flight_recorder([("n1", []), ("n2", [])]) == {}
