"""watch/seqfeed.py against servers over real sockets: good answers, and servers that answer badly —
garbage, huge, slow, redirecting, failing: each gives one line of error for that rank and the feed goes on;
nothing hangs, nothing is executed. The URLs come from a real TCPStore, as start_debug_server() writes them."""
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


def test_urls_come_from_the_jobs_real_store():
    """torch's TCPStore, as start_debug_server() registers: debug_server/rank<N> -> http://host:port."""
    torch = pytest.importorskip("torch")
    import datetime

    from ports import free_port
    port = free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, None, True, timeout=datetime.timedelta(seconds=5))
    store.set("debug_server/rank0", "http://127.0.0.1:5")
    store.set("debug_server/rank1", "file:///etc/passwd")  # not an http URL: never asked

    class R(_R):
        def __init__(self, rank):
            super().__init__(rank)
            self.env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    assert seqfeed._store_urls([R(0), R(1)]) == {0: "http://127.0.0.1:5"}


def test_no_worker_server_thread_means_no_feed_in_auto_mode(tmp_path):
    import os
    assert seqfeed.for_ranks([type("R", (), {"pid": os.getpid(), "rank": 0})()], "auto") is None
    proc = tmp_path / "proc" / "7" / "task" / "8"
    proc.mkdir(parents=True)
    (proc / "comm").write_text("pt_workerserver\n")
    assert seqfeed.has_debug_server(7, root=str(tmp_path / "proc"))


def _listener(*binds):
    """A real process listening where torch's ranks do: (family, address) pairs, each on port 0."""
    import subprocess
    import sys
    code = ("import socket,sys,time\n"
            "for fam, addr in " + repr(list(binds)) + ":\n"
            "    s = socket.socket(getattr(socket, fam)); s.bind((addr, 0)); s.listen(); globals().setdefault('k', []).append(s)\n"
            "    print(s.getsockname()[1], flush=True)\n"
            "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    ports = [int(p.stdout.readline()) for _ in binds]
    return p, ports


def test_the_worker_servers_port_is_the_ranks_one_ipv6_wildcard_listener():
    """start_debug_server binds ("::", 0); Gloo and NCCL bind an interface's address, the store MASTER_PORT."""
    p, (ws, gloo, store) = _listener(("AF_INET6", "::"), ("AF_INET", "127.0.0.1"), ("AF_INET6", "::"))
    try:
        assert seqfeed.local_url(p.pid, skip_ports=[store]) == f"http://127.0.0.1:{ws}"
        assert seqfeed.local_url(p.pid) is None  # two candidates: ambiguous, the store decides
    finally:
        p.kill()
        p.wait()
    assert seqfeed.local_url(p.pid) is None  # gone


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


def test_a_rank_in_another_network_namespace_is_not_reached_through_our_loopback():
    import shutil
    import subprocess
    import sys
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a network namespace of its own")
    code = "import socket,time\ns=socket.socket(socket.AF_INET6); s.bind(('::',0)); s.listen(); print(1, flush=True); time.sleep(60)"
    p = subprocess.Popen(["unshare", "--net", sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "1"
        pid = next(int(c) for c in open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()) \
            if open(f"/proc/{p.pid}/comm").read().strip() == "unshare" else p.pid
        assert seqfeed.local_url(pid) is None
    finally:
        p.kill()
        p.wait()
