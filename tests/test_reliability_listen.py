"""Issue 10: `network --listen` against hostile peers and signals; DD103 against a hostile listener."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddpdoctor.peerprobe import server as L
from ddpdoctor.probes import handshake
from ddpdoctor.probes import sockets
from ports import free_port

ROOT = Path(__file__).resolve().parent.parent
DD = [sys.executable, "-m", "ddpdoctor"]


def _fake_listener(reply: bytes):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.recv(512)
            c.sendall(reply)
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv


@pytest.mark.parametrize("reply", [b"DDPDOCTOR/1 WELCOME evil 99999 1-99999\n", b"DDPDOCTOR/1 WELCOME evil 0\n",
                                   "DDPDOCTOR/1 WELCOME evil ²\n".encode(), b"DDPDOCTOR/1 WELCOME evil 5 9-1\n"])
@pytest.mark.torchjob
def test_a_welcome_with_an_impossible_port_is_not_a_crash(reply):
    srv = _fake_listener(reply)
    try:
        h = handshake.hello("127.0.0.1", srv.getsockname()[1], "w", timeout=2)
    finally:
        srv.close()
    assert h.eport == 0 or (1 <= h.eport <= 65535 and h.eport_range is None)


@pytest.mark.torchjob
def test_dd103_against_a_listener_offering_an_out_of_range_port_is_not_a_crash():
    from ddpdoctor import registry, runner
    from ddpdoctor.facts.network import NetworkFacts
    srv = _fake_listener(b"DDPDOCTOR/1 WELCOME evil 99999 1-99999\n")
    try:
        ctx = NetworkFacts("127.0.0.1", srv.getsockname()[1], probe_timeout=2)
        ctx.__dict__["master_is_local"] = False  # judge it as a worker would (a remote master)
        (res,) = runner.run_checks([registry.get("DD103")], ctx, deadline=10)
    finally:
        srv.close()
    assert res.status.value != "crash", res.reason


@pytest.mark.torchjob
def test_tcp_probe_of_an_impossible_port_is_an_error_result():
    assert sockets.tcp_probe("127.0.0.1", 70000, timeout=0.5).state == sockets.ERROR


@pytest.mark.torchjob
def test_handlers_are_bounded_and_forgotten_and_the_server_survives_a_thread_failure(monkeypatch):
    monkeypatch.setattr(L, "MAX_HANDLERS", 4)
    port = free_port()
    srv = L.ProbeServer(port, "m")
    try:
        # 10 silent peers: at most 4 handlers at once, the others are closed unanswered
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        time.sleep(0.5)
        assert len(srv._handlers) <= 4
        for c in silent:
            c.close()
        # a thread that cannot start does not kill the server thread
        real_start = threading.Thread.start
        calls = {"n": 0}

        def failing_start(self):
            if self.name.startswith("Thread") and calls["n"] == 0 and self._target == srv._handle:
                calls["n"] += 1
                raise RuntimeError("can't start new thread")
            return real_start(self)

        monkeypatch.setattr(threading.Thread, "start", failing_start)
        for _ in range(30):  # wait for the silent handlers to time out (2 s) and free their slots
            if not srv._handlers:
                break
            time.sleep(0.2)
        assert not srv._handlers  # finished handlers are forgotten
        socket.create_connection(("127.0.0.1", port)).close()  # this one hits the failing start
        time.sleep(0.3)
        assert calls["n"] == 1 and srv._thread.is_alive()
        h = handshake.hello("127.0.0.1", port, "w1", timeout=3)
        assert h.is_ddpdoctor  # still serving
        for _ in range(20):
            if not srv._handlers:
                break
            time.sleep(0.1)
        assert not srv._handlers
    finally:
        srv.close()
    assert sockets.tcp_probe("127.0.0.1", port, timeout=0.5).state == sockets.REFUSED


def _start_listen_cli(port, *extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([*DD, "network", "--listen", "--port", str(port), "--timeout", "30", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for _ in range(150):
        if sockets.tcp_probe("127.0.0.1", port, timeout=0.2).state == sockets.OPEN:
            return p
        time.sleep(0.1)
    p.kill()
    raise AssertionError("listener did not come up: " + p.stderr.read())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.torchjob
def test_a_signal_to_listen_still_reports_the_arrivals_as_valid_json(sig):
    port = free_port()
    p = _start_listen_cli(port, "--json")
    try:
        h = handshake.hello("127.0.0.1", port, "worker7", timeout=3)
        assert h.is_ddpdoctor
        time.sleep(0.3)
        p.send_signal(sig)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    d = json.loads(out)
    assert d["interrupted"] == sig.name
    assert [w["host"] for w in d["workers"]] == ["worker7"] and d["workers"][0]["addr"] == "127.0.0.1"
    assert p.returncode == 1


@pytest.mark.torchjob
def test_a_signal_to_listen_prints_the_arrivals_in_text():
    port = free_port()
    p = _start_listen_cli(port)
    try:
        h = handshake.hello("127.0.0.1", port, "worker7", timeout=3)
        handshake.ephemeral("127.0.0.1", h.eport, "worker7", timeout=3)
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert "worker7 from 127.0.0.1" in out and "stopped by SIGTERM" in out, (out, err)


@pytest.mark.torchjob
def test_listen_without_expect_exits_1_when_nobody_came():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cp = subprocess.run([*DD, "network", "--listen", "--port", str(free_port()), "--timeout", "0.5"],
                        capture_output=True, text=True, env=env, timeout=60)
    assert cp.returncode == 1, (cp.stdout, cp.stderr)
    assert "no worker arrived" in cp.stdout


def test_firewall_fix_for_an_ipv6_peer_is_ip6tables():
    from ddpdoctor.checks.reachability import iptables_for
    assert iptables_for("fd00::2") == "ip6tables"
    assert iptables_for("198.18.0.2") == "iptables"
    assert iptables_for("::ffff:198.18.0.2") == "iptables"


@pytest.mark.torchjob
def test_listen_records_a_bounded_number_of_claimed_names(monkeypatch):
    monkeypatch.setattr(L, "MAX_WORKERS", 3)
    port = free_port()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", L.listen(port, expect=None, timeout=3, reply_host="m")))
    t.start()
    for _ in range(50):
        if sockets.tcp_probe("127.0.0.1", port, timeout=0.2).state == sockets.OPEN:
            break
        time.sleep(0.05)
    for i in range(8):  # one peer claiming eight names
        assert handshake.hello("127.0.0.1", port, f"fake{i}", timeout=2).is_ddpdoctor
    t.join(10)
    r = out["r"]
    assert len(r.workers) == 3 and all(w.addr == "127.0.0.1" for w in r.workers)


def test_cluster_mode_incoming_is_bounded(monkeypatch):
    """Issue 10 (same class as the listener's handler bound): a ProbeServer whose events nobody consumes
    (cluster mode keeps them for its report) stores at most MAX_INCOMING and counts the rest."""
    from ddpdoctor.peerprobe import server as S
    monkeypatch.setattr(S, "MAX_INCOMING", 5)
    srv = S.ProbeServer.__new__(S.ProbeServer)
    srv.incoming, srv.dropped, srv._on_event = [], 0, None
    srv.changed = threading.Condition()
    for i in range(12):
        srv._record({"from": f"n{i}"})
    assert len(srv.incoming) == 5 and srv.dropped == 7
