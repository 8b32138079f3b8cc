"""Hostile peers of `network --listen` (issue 21): idle connections must not shut real workers out, and a
peer that does only half the handshake is not diagnosed as a firewall with a line to paste. What held
up, kept: the listener keeps its deadline and closes both ports."""
from __future__ import annotations

import pytest

import socket
import time

from ddpdoctor.peerprobe import server as L
from ddpdoctor.probes import handshake
from ddpdoctor.probes import sockets
from ddpdoctor.render import listen as show
from ports import free_port

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob


def test_70_idle_connections_do_not_shut_out_a_real_worker():
    port = free_port()
    srv = L.ProbeServer(port, "master")
    idle = []
    try:
        for _ in range(70):  # more than MAX_HANDLERS, held open and silent
            idle.append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(0.2)
        t0 = time.monotonic()
        h = handshake.hello("127.0.0.1", port, "worker1", timeout=3)
        assert h.is_ddpdoctor, h
        e = handshake.ephemeral("127.0.0.1", h.eport, "worker1", timeout=3)
        assert e.state == sockets.OPEN, e
        assert time.monotonic() - t0 < 3
        assert len(srv._handlers) <= L.MAX_HANDLERS
        for _ in range(40):  # the server records an exchange just after it answered
            if {ev["port"] for ev in srv.incoming if ev["from"] == "worker1"} == {"rendezvous", "ephemeral"}:
                break
            time.sleep(0.05)
        assert {ev["port"] for ev in srv.incoming if ev["from"] == "worker1"} == {"rendezvous", "ephemeral"}
    finally:
        for c in idle:
            c.close()
        srv.close()
    assert sockets.tcp_probe("127.0.0.1", port, timeout=0.5).state == sockets.REFUSED


def test_a_half_handshake_is_not_called_a_firewall_with_a_line_to_paste():
    port = free_port()
    # a peer that says HELLO and never comes to the ephemeral port (an impostor, a worker that died)
    import threading
    out: dict = {}

    def run():
        out["res"] = L.listen(port, expect=1, timeout=2.0, reply_host="master")
    t = threading.Thread(target=run)
    t.start()
    for _ in range(50):
        if sockets.tcp_probe("127.0.0.1", port, timeout=0.2).state == sockets.OPEN:
            break
        time.sleep(0.05)
    assert handshake.hello("127.0.0.1", port, "impostor", timeout=2).is_ddpdoctor
    t.join(10)
    res = out["res"]
    (w,) = res.workers
    assert not w.complete
    lines = show.summary(res, port=port, expect=1, partial=[w], partial_fix=["sudo iptables -I INPUT ..."],
                         missing=0, probe_cmd="ddpdoctor network --master master")
    text = "\n".join(lines)
    assert "a firewall passes the rendezvous port and drops" not in text  # not a verdict from this evidence
    assert "ddpdoctor network --master master" in text  # what decides it, run on that worker
    fix_lines = [line for line in lines if "iptables" in line]
    assert fix_lines and all("if " in line for line in fix_lines), text  # only under the condition
