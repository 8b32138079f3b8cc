"""`ddpdoctor watch` reads REAL torchrun + Gloo ranks' collective sequence numbers from torch's debug server
(the job called torch.distributed.debug.start_debug_server(): no environment variable starts it in torch
2.13) and names a hang from them: the rank that never entered the collective the others wait in, with the
collective's number."""
from __future__ import annotations

import time

import pytest

from ports import free_port
from watchlab import TrainJob, Watch, killed_after, line_of

pytest.importorskip("torch")
pytestmark = pytest.mark.lab
HANG_GOAL_S = 15.0


@pytest.fixture
def job(tmp_path):
    def make(**kw):  # a port of its own for rank 0's web page, each job
        return TrainJob(tmp_path, env={"TRAIN_DEBUG_SERVER": str(free_port()), "TORCH_FR_BUFFER_SIZE": "2000"}, **kw)
    with killed_after(make) as start:
        yield start


def test_healthy_loop_then_a_sleeping_rank_is_named_from_its_sequence_number(job):
    j = job(nproc=2, seconds=120)
    j.wait_ready()
    # no flag: watch sees the ranks' pt_workerserver threads and reads their numbers by itself
    w = Watch("--pid", str(j.proc.pid))
    try:
        time.sleep(40)  # healthy: the numbers move, nothing to say (watch imports torch to read the store: slow under load)
        assert w.events == [], w.events
        t = j.fault("sleep:1")
        e = w.wait_for("hang", HANG_GOAL_S + 5, after=t)
        assert e is not None, (w.events, j.log.read_text()[-2000:])
        assert e["at"] - t <= HANG_GOAL_S, e["at"] - t
        assert e["ranks"] == [1], e
        assert e["source"] == "debug server" and e["collective"] == "all_reduce" and e["pg"] == "0", e
        assert type(e["seq"]) is int and e["seq"] > 10, e
        assert e["detail"].startswith(f"never entered collective #{e['seq']} all_reduce of pg 0"), e["detail"]
        assert "user code" in e["detail"], e["detail"]
        assert e["waiting"] == {"ranks": [0], "call": "all_reduce", "at": f"#{e['seq']} of pg 0"}
        (x,) = e["where"]
        assert x["pid"] == j.rank_pid(1) and x["where"]["line"] == line_of("LINE_SLEEP")
        assert j.proc.poll() is None  # watch never touched the job
    finally:
        rc = w.stop()
    assert rc == 1 and w.events[-1]["kind"] == "summary" and w.events[-1]["open"] == ["hang"], (w.events, w.stderr)


def test_debug_server_off_names_the_same_hang_from_stacks(job):
    """--no-debug-server: the judgement without the numbers still stands (no seq in the event)."""
    j = job(nproc=2, seconds=90)
    j.wait_ready()
    w = Watch("--pid", str(j.proc.pid), "--no-debug-server")
    try:
        time.sleep(8)
        t = j.fault("sleep:1")
        e = w.wait_for("hang", HANG_GOAL_S + 5, after=t)
        assert e is not None and e["ranks"] == [1] and "seq" not in e and "source" not in e, w.events
    finally:
        w.stop()


def test_debug_server_asked_of_a_job_without_one_is_one_line_and_the_hang_is_still_named(tmp_path):
    """--debug-server on a job that never called start_debug_server(): one line on stderr (no rank has the
    server's pt_workerserver thread; the line to add), stdout stays events only, and watch goes on with its
    other measures: the hang is named from the stacks, and the exit code is the events' (1), not bad usage (2)."""
    j = TrainJob(tmp_path, nproc=2, seconds=90)
    try:
        j.wait_ready()
        w = Watch("--pid", str(j.proc.pid), "--debug-server")
        try:
            time.sleep(8)
            assert w.events == [], w.events
            t = j.fault("sleep:1")
            e = w.wait_for("hang", HANG_GOAL_S + 5, after=t)
            assert e is not None and e["ranks"] == [1] and "seq" not in e, w.events
        finally:
            rc = w.stop()
        assert rc == 1, w.stderr
        lines = [ln for ln in w.stderr.splitlines() if "debug server" in ln]
        assert len(lines) == 1, w.stderr
        assert lines[0].startswith("ddpdoctor watch: "), lines
        assert ("no rank runs torch's debug server: no thread named pt_workerserver in rank "
                f"0 (pid {j.rank_pid(0)}), 1 (pid {j.rank_pid(1)})") in lines[0], lines
        assert "`from torch.distributed.debug import start_debug_server; start_debug_server()`" in lines[0], lines
    finally:
        j.kill()
