"""watch/seqfeed.py against servers over real sockets: good answers, and servers that answer badly —
garbage, huge, slow, redirecting, failing: each gives one line of error for that rank and the feed goes on;
nothing hangs, nothing is executed. Where the URLs come from: tests/test_workerserver_torchjob.py."""
from __future__ import annotations

import http.server
import os
import json
import threading
import time
from pathlib import Path

import pytest

from ddpdoctor.watch import seqfeed

FIX = Path(__file__).parent / "flightrec" / "debug-server-gloo-sleep"


class _Handler(http.server.BaseHTTPRequestHandler):
    behaviour = {}

    def log_message(self, *a):
        pass

    def do_POST(self):
        how = self.behaviour.get(self.path.split("?")[0].rsplit("/", 1)[-1], "404")
        if how == "404":
            self.send_response(404)
            self.end_headers()
            return
        if how == "redirect":
            self.send_response(302)
            self.send_header("Location", "http://198.18.0.1/")
            self.end_headers()
            return
        if how == "500":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"Handler failed")
            return
        self.send_response(200)
        self.end_headers()
        if how == "trickle":
            try:
                for _ in range(50):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
        elif how == "huge":
            chunk = b"x" * (1 << 20)
            try:
                for _ in range(200):
                    self.wfile.write(chunk)
            except OSError:
                pass
        elif how == "garbage":
            self.wfile.write(b"\x00\x01not json at all")
        else:
            self.wfile.write(how.encode())


@pytest.fixture
def server():
    srvs = []

    def start(**behaviour):
        h = type("H", (_Handler,), {"behaviour": behaviour})
        s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
        srvs.append(s)
        return f"http://127.0.0.1:{s.server_address[1]}"
    yield start
    for s in srvs:
        s.shutdown()
        s.server_close()


class _R:
    def __init__(self, rank):
        self.rank, self.pid, self.env, self.world_size = rank, 0, {}, 4


def _feed(urls):
    return seqfeed.SeqFeed([_R(r) for r in urls], resolve=lambda ranks: dict(urls))


def test_each_bad_server_is_one_line_for_its_rank_and_the_good_one_is_read(server):
    good = (FIX / "gloo_fr_trace_rank0.json").read_text()
    urls = {0: server(fr_trace_json=good), 1: server(fr_trace_json="garbage"), 2: server(fr_trace_json="trickle"),
            3: server(fr_trace_json="huge")}
    f = _feed(urls)
    t0 = time.monotonic()
    seqfeed_cap = seqfeed.FULL_MAX
    seqfeed.FULL_MAX = 8 << 20
    try:
        f.tick(time.monotonic())
    finally:
        seqfeed.FULL_MAX = seqfeed_cap
    assert time.monotonic() - t0 < 4 * seqfeed.TIMEOUT_S + 2  # one after the other here; the thread runs them at once
    assert f.latest(0)["pgs"]["0"]["done"] == 7998 and f.latest(0)["source"] == "fr_trace_json"
    assert "JSONDecodeError" in f.latest(1)["error"] or "ValueError" in f.latest(1)["error"]
    assert "TimeoutError" in f.latest(2)["error"]
    assert "larger than" in f.latest(3)["error"]


def test_redirects_and_failures_are_errors(server):
    f = _feed({0: server(dump_nccl_trace_json="redirect"), 1: server(dump_nccl_trace_json="500")})
    f.tick(time.monotonic())
    assert "HTTPError" in f.latest(0)["error"] and "302" in f.latest(0)["error"]
    assert "500" in f.latest(1)["error"]


def test_nccl_handler_is_preferred_and_names_the_pending_collective_when_dense(server):
    status = {"pg_status": {"0": {"last_enqueued_collective": "12", "last_started_collective": "-1",
                                  "last_completed_collective": "11"}}}
    active = {**status, "entries": [{"collective_seq_id": 12, "pg_id": 0, "profiling_name": "nccl:all_reduce",
                                     "is_p2p": False}]}

    class H(_Handler):
        def do_POST(self):
            body = json.dumps(active if "onlyactive=true" in self.path else status).encode()
            self.behaviour = {"dump_nccl_trace_json": body.decode()}
            _Handler.do_POST(self)
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        f = _feed({0: f"http://127.0.0.1:{s.server_address[1]}"})
        f.tick(time.monotonic())
        assert f.latest(0)["source"] == "dump_nccl_trace_json"
        assert f.latest(0)["pgs"]["0"] == {"enq": 12, "started": -1, "done": 11, "op": None}
        f.dense(time.monotonic())
        f.tick(time.monotonic() + seqfeed.CHEAP_EVERY_S)
        assert f.latest(0)["pgs"]["0"]["op"] == "all_reduce"
    finally:
        s.shutdown()
        s.server_close()


def test_a_rank_that_keeps_failing_is_asked_less_often(server):
    f = _feed({0: server(fr_trace_json="garbage")})
    now = time.monotonic()
    for _ in range(3):
        now = max(now, f._by_rank[0].next if f._by_rank else now)
        f.tick(now)
    assert f._by_rank[0].fails == 3 and f._by_rank[0].next - now >= seqfeed.BACKOFF_S - 1


def test_no_worker_server_thread_means_no_feed_in_auto_mode():
    assert seqfeed.for_ranks([type("R", (), {"pid": os.getpid(), "rank": 0})()], "auto") is None


def test_asked_for_on_a_job_without_a_server_says_so_once_with_the_line_to_add():
    """--debug-server on ranks with no pt_workerserver thread (this process): one note, what was looked for and
    how to start the server; the feed keeps looking (a server started later) and says nothing more."""
    notes = []
    f = seqfeed.SeqFeed([type("R", (), {"pid": os.getpid(), "rank": 0, "env": {}, "world_size": 1})()],
                        note=notes.append)
    for k in range(3):
        f.tick(time.monotonic() + k * seqfeed.RESOLVE_EVERY_S)
    assert notes == [f"no rank runs torch's debug server: no thread named pt_workerserver in rank 0 (pid {os.getpid()}); "
                     "to start it, add to every rank after init_process_group: `from torch.distributed.debug import "
                     "start_debug_server; start_debug_server()` (torch >= 2.10; in torch 2.13 rank 0 also needs "
                     "`pip install tabulate`, which its web page imports); watching without its sequence numbers, "
                     "looking again every 30 s"]
    assert f.latest(0) is None


def test_a_server_found_later_and_one_that_stops_answering_are_each_said_once(server):
    notes, urls = [], {}

    def resolve(ranks):
        if not urls:
            raise LookupError("no rank runs torch's debug server: (looked)")
        return dict(urls)
    f = seqfeed.SeqFeed([_R(0)], resolve=resolve, note=notes.append)
    now = time.monotonic()
    f.tick(now)
    urls[0] = server(fr_trace_json=(FIX / "gloo_fr_trace_rank0.json").read_text())
    f.tick(now + seqfeed.RESOLVE_EVERY_S)
    assert f.latest(0)["pgs"]
    assert notes[1:] == ["torch's debug server found in rank 0: reading its sequence numbers"]
    f._by_rank[0].url = "http://127.0.0.1:1"  # the server went away
    for k in range(4):
        f.tick(now + seqfeed.RESOLVE_EVERY_S + (k + 1) * seqfeed.BACKOFF_S)
    gone = [n for n in notes if "did not answer" in n]
    assert len(gone) == 1 and gone[0].startswith("rank 0's debug server at http://127.0.0.1:1 did not answer 3 times")


def test_a_restarted_rank_is_looked_up_again(server):
    urls = {0: server(fr_trace_json=(FIX / "gloo_fr_trace_rank0.json").read_text())}
    f = _feed(urls)
    f.tick(time.monotonic())
    assert f.latest(0)["pgs"]
    new = _R(0)
    new.pid = 4242  # the next generation's process
    urls[0] = server(fr_trace_json=(FIX / "gloo_fr_trace_rank1.json").read_text())
    f.add([new])
    assert f.latest(0) is None
    f.tick(time.monotonic())
    assert f.latest(0)["pgs"]["0"]["enq"] == 7998
