"""probes/workerserver.py: where each rank's torch debug server listens, found without importing torch —
from /proc, and from the job's real TCPStore (torch's own server, started here) over a plain socket."""
from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddpdoctor.probes import workerserver
from ports import free_port, rank_standin

ROOT = Path(__file__).resolve().parent.parent


class R:
    def __init__(self, rank: int, pid: int, port: int | None = None, world: int = 2):
        self.rank, self.pid, self.world_size = rank, pid, world
        self.env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world)} if port else {}


@pytest.fixture
def store():
    """torch's own TCPStore server, as torchrun's agent (or rank 0) runs it for the job."""
    torch = pytest.importorskip("torch")
    port = free_port()
    s = torch.distributed.TCPStore("127.0.0.1", port, None, True, timeout=datetime.timedelta(seconds=5))
    yield port, s


def _no_torch(code: str) -> str:
    """Run `code` in a fresh interpreter and fail if it imported torch; its stdout."""
    p = subprocess.run([sys.executable, "-c", code + "\nimport sys\nassert 'torch' not in sys.modules, 'torch imported'"],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_urls_start_debug_server_registered_are_read_from_the_real_store_without_torch(store):
    port, s = store
    s.set("debug_server/rank0", "http://node1:40123")       # what start_debug_server() writes
    s.set("debug_server/rank1", "file:///etc/passwd")        # not an http URL: never asked
    s.set("other/rank2", "http://node3:1")                   # another prefix: not ours
    out = _no_torch("from ddpdoctor.probes import workerserver as w\n"
                    f"print(w.store_urls('127.0.0.1', {port}, [0, 1, 2, 3], 2.0))")
    assert out.strip() == "{0: 'http://node1:40123'}"
    assert s.get("debug_server/rank0") == b"http://node1:40123" and not s.check(["debug_server/rank3"])  # nothing written


def test_a_store_that_speaks_another_protocol_is_told_apart_and_a_silent_one_times_out():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    held = []

    def serve(answer: bytes | None):
        c, _ = srv.accept()
        held.append(c)
        c.recv(64)
        if answer is not None:
            c.sendall(answer)
    try:
        threading.Thread(target=serve, args=(b"HTTP/1.1 400 Bad Request\r\n\r\n",), daemon=True).start()
        with pytest.raises(workerserver.StoreProtocolError):
            workerserver.store_get("127.0.0.1", port, ["debug_server/rank0"], 2.0)
        threading.Thread(target=serve, args=(None,), daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            workerserver.store_get("127.0.0.1", port, ["debug_server/rank0"], 0.5)
        assert time.monotonic() - t0 < 2.0
    finally:
        for c in held:
            c.close()
        srv.close()


def test_no_pt_workerserver_thread_says_what_was_looked_for_and_never_touches_the_store():
    """The job's code calls start_debug_server in every rank or in none: no thread, no server, no store read."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    try:
        found = workerserver.find([R(0, os.getpid(), srv.getsockname()[1])], world=True)
        assert found.urls == {} and found.serving == [] and found.store == ""
        assert found.why == f"no rank runs torch's debug server: no thread named pt_workerserver in rank 0 (pid {os.getpid()})"
        with pytest.raises(socket.timeout):
            srv.accept()  # nobody connected
    finally:
        srv.close()
    assert "start_debug_server()" in workerserver.START_HELP and "tabulate" in workerserver.START_HELP


def test_a_thread_named_pt_workerserver_is_a_server(tmp_path):
    proc = tmp_path / "proc" / "7" / "task" / "8"
    proc.mkdir(parents=True)
    (proc / "comm").write_text("pt_workerserver\n")
    assert workerserver.has_debug_server(7, root=str(tmp_path / "proc"))
    assert not workerserver.has_debug_server(os.getpid())


def test_the_worker_servers_port_is_the_ranks_one_ipv6_wildcard_listener():
    """start_debug_server binds ("::", 0); Gloo and NCCL bind an interface's address, the store MASTER_PORT."""
    p, (ws, gloo, store) = rank_standin(("AF_INET6", "::"), ("AF_INET", "127.0.0.1"), ("AF_INET6", "::"))
    try:
        assert workerserver.local_url(p.pid, skip_ports=[store]) == f"http://127.0.0.1:{ws}"
        assert workerserver.local_url(p.pid) is None  # two candidates: ambiguous, the store decides
        found = workerserver.find([R(0, p.pid, store)])
        assert found.urls == {0: f"http://127.0.0.1:{ws}"} and found.store == "" and found.why == ""
    finally:
        p.kill()
        p.wait()
    assert workerserver.local_url(p.pid) is None  # gone


def test_what_proc_leaves_ambiguous_comes_from_the_store_and_other_nodes_ranks_with_world(store):
    port, s = store
    p, (a, b) = rank_standin(("AF_INET6", "::"), ("AF_INET6", "::"))   # two wildcard listeners: /proc cannot tell
    s.set("debug_server/rank0", f"http://127.0.0.1:{b}")
    s.set("debug_server/rank1", "http://node2:5555")                 # rank 1 runs on another node
    try:
        found = workerserver.find([R(0, p.pid, port)])
        assert found.urls == {0: f"http://127.0.0.1:{b}"} and found.store == f"127.0.0.1:{port}"
        found = workerserver.find([R(0, p.pid, port)], world=True)
        assert found.urls == {0: f"http://127.0.0.1:{b}", 1: "http://node2:5555"}
        # inspect --gather: rank 1 was sampled on node2; its pid means nothing here (even one that exists here)
        remote = {"rank": 1, "pid": p.pid, "host": "node2", "env": R(0, 0, port).env}
        found = workerserver.find([R(0, p.pid, port), remote], world=True)
        assert found.urls == {0: f"http://127.0.0.1:{b}", 1: "http://node2:5555"} and found.serving == [0]
        s.delete_key("debug_server/rank0")
        found = workerserver.find([R(0, p.pid, port)])
        assert found.urls == {} and found.why == (
            "rank 0 runs torch's debug server (a pt_workerserver thread) but /proc shows no single listener of it "
            f"on [::], and the job's store at 127.0.0.1:{port} holds no debug_server/rank<N> for it")
    finally:
        p.kill()
        p.wait()


def test_a_store_that_cannot_be_reached_is_one_line():
    p, _ = rank_standin(("AF_INET6", "::"), ("AF_INET6", "::"))
    port = free_port()  # nothing listens there
    try:
        found = workerserver.find([R(0, p.pid, port)], timeout=1.0)
        assert found.urls == {} and "\n" not in found.why
        assert found.why.startswith("rank 0 runs torch's debug server") and f"store at 127.0.0.1:{port} could not be read" in found.why
    finally:
        p.kill()
        p.wait()


def test_a_rank_in_another_network_namespace_is_not_reached_through_our_loopback():
    import shutil
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a network namespace of its own")
    code = "import socket,time\ns=socket.socket(socket.AF_INET6); s.bind(('::',0)); s.listen(); print(1, flush=True); time.sleep(60)"
    p = subprocess.Popen(["unshare", "--net", sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "1"
        pid = next(int(c) for c in open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()) \
            if open(f"/proc/{p.pid}/comm").read().strip() == "unshare" else p.pid
        assert workerserver.local_url(pid) is None
    finally:
        p.kill()
        p.wait()


def _answer_once(raw: bytes):
    """A server that answers the first request with these bytes and closes: the URL."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve():
        c, _ = srv.accept()
        with c:
            c.recv(65536)
            try:
                c.sendall(raw)
            except OSError:
                pass
        srv.close()
    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}"


def test_the_http_client_reads_what_cpp_httplib_sends_and_refuses_what_it_should_not():
    """Content-Length (how the worker server's handlers answer), chunked, read-to-close; a status other
    than 200 (redirects never followed), an answer over the cap, a header that never ends: one exception each."""
    post = workerserver.http_post
    assert post(_answer_once(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}trailing"),
                "/handler/x", timeout=2, cap=100) == b'{"a":1}'
    assert post(_answer_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;ext=1\r\n:1}\r\n0\r\n\r\n"),
                "/handler/x", timeout=2, cap=100) == b'{"a":1}'
    assert post(_answer_once(b"HTTP/1.0 200 OK\r\n\r\nuntil close"), "/handler/x", timeout=2, cap=100) == b"until close"
    with pytest.raises(workerserver.HTTPError) as e:
        post(_answer_once(b"HTTP/1.1 302 Found\r\nLocation: http://198.18.0.1/\r\n\r\n"), "/h", timeout=2, cap=100)
    assert e.value.code == 302
    with pytest.raises(ValueError, match="larger than"):
        post(_answer_once(b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n"), "/h", timeout=2, cap=1 << 20)
    with pytest.raises(ValueError, match="larger than"):
        post(_answer_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffff\r\n"), "/h", timeout=2, cap=1 << 20)
    with pytest.raises(ValueError, match="no HTTP header"):
        post(_answer_once(b"X-Flood: " + b"y" * (200 << 10)), "/h", timeout=2, cap=100)
    with pytest.raises(ValueError, match="not an HTTP answer"):
        post(_answer_once(b"\x00\x01garbage\r\n\r\n"), "/h", timeout=2, cap=100)
    with pytest.raises(ValueError, match="not a worker server"):
        post("file:///etc/passwd", "/h", timeout=2, cap=100)


def test_the_http_client_loads_no_openssl():
    """A poll, as watch makes it: no ssl, hashlib or http.client loaded (OpenSSL's libcrypto: ≈6 MiB of RSS)."""
    out = _no_torch("import socket, sys, threading\n"
                    "from ddpdoctor.watch import seqfeed\nfrom ddpdoctor.inspect import debugserver\n"
                    "s = socket.create_server(('127.0.0.1', 0))\n"
                    "def serve():\n"
                    "    c, _ = s.accept(); c.recv(9999); c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\n{}'); c.close()\n"
                    "threading.Thread(target=serve).start()\n"
                    "print(seqfeed.post(f'http://127.0.0.1:{s.getsockname()[1]}', 'fr_trace_json'))\n"
                    "print(sorted(m for m in ('ssl', '_hashlib', 'http.client', 'urllib.request') if m in sys.modules))")
    assert out.split() == ["b'{}'", "[]"]
