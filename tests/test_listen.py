"""`--listen` and the worker handshake over real loopback sockets."""
import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from ddpdoctor.probes import handshake
from ddpdoctor.peerprobe.server import ListenError, listen
from ddpdoctor.probes import sockets
from ports import free_port




def _listening() -> tuple[int, dict, threading.Thread]:
    """`listen(expect=1)` on a free port in a thread, once the port answers: (port, {"r": its result once done}, thread)."""
    port = free_port()
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", listen(port, expect=1, timeout=10, reply_host="master1")))
    t.start()
    for _ in range(50):
        if sockets.tcp_probe("127.0.0.1", port, timeout=0.2).state == sockets.OPEN:
            break
        time.sleep(0.05)
    return port, out, t


@pytest.mark.torchjob
def test_worker_handshake_reaches_both_ports_and_listener_stops_at_expect():
    port, out, t = _listening()
    h = handshake.hello("127.0.0.1", port, "worker7", timeout=2)
    assert h.is_ddpdoctor and h.peer_host == "master1" and h.eport and h.eport_range
    assert h.eport_range[0] <= h.eport <= h.eport_range[1]
    e = handshake.ephemeral("127.0.0.1", h.eport, "worker7", timeout=2)
    assert e.state == sockets.OPEN
    t.join(5)
    r = out["r"]
    assert r.ok and not r.timed_out and r.duration_s < 5
    (w,) = r.workers
    assert w.host == "worker7" and w.interface == "lo" and w.complete
    # nothing left listening on either port
    assert sockets.tcp_probe("127.0.0.1", port, timeout=0.5).state == sockets.REFUSED
    assert sockets.tcp_probe("127.0.0.1", h.eport, timeout=0.5).state == sockets.REFUSED


@pytest.mark.torchjob
def test_a_non_ddpdoctor_service_is_told_apart():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve():
        c, _ = srv.accept()
        c.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        c.close()

    threading.Thread(target=serve, daemon=True).start()
    h = handshake.hello("127.0.0.1", port, "w", timeout=2)
    srv.close()
    assert not h.is_ddpdoctor and h.banner.startswith("SSH-2.0")


@pytest.mark.torchjob
def test_listener_times_out_without_workers_and_port_in_use_is_an_error():
    port = free_port()
    t0 = time.monotonic()
    r = listen(port, expect=2, timeout=0.5, reply_host="m")
    assert r.timed_out and not r.ok and time.monotonic() - t0 < 2
    blocker = socket.socket()
    blocker.bind(("0.0.0.0", port))
    blocker.listen(1)
    try:
        try:
            listen(port, expect=1, timeout=0.5, reply_host="m")
        except ListenError as e:
            assert "already in use" in str(e)
        else:
            raise AssertionError("listen on a busy port must fail")
    finally:
        blocker.close()


@pytest.mark.torchjob
def test_listen_cli_json_and_exit_code_when_nobody_comes():
    port = free_port()
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "network", "--listen", "--port", str(port),
                        "--expect", "1", "--timeout", "0.5", "--json"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    d = json.loads(p.stdout)
    assert d["command"] == "network-listen" and d["timed_out"] and d["workers"] == []


@pytest.mark.torchjob
def test_master_port_in_use_names_the_process():
    port = free_port()
    holder = subprocess.Popen([sys.executable, "-c",
                               f"import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                               f"s.bind(('0.0.0.0',{port}));s.listen();print('up',flush=True);time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", "network", "--master", "127.0.0.1", "--port", str(port),
                            "--json", "--select", "DD105"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 1, p.stdout + p.stderr
        f = json.loads(p.stdout)["results"][0]["findings"][0]
        assert f["severity"] == "error" and f"pid {holder.pid}" in f["message"]
        assert any(f"kill {holder.pid}" in c for c in f["fix"]["commands"])
    finally:
        holder.kill()
        holder.wait()


def test_listen_summary_renders_the_verdict_it_is_given():
    """render/listen.py writes what cli/network.py decided: a partial worker with its fix, and the missing."""
    from types import SimpleNamespace as NS
    from ddpdoctor.render import listen as show
    full = NS(host="node2", addr="198.18.0.2", interface="eth0", complete=True)
    half = NS(host="node3", addr="198.18.0.3", interface="eth0", complete=False)
    res = NS(workers=[full, half], duration_s=6.04, timed_out=True, interrupted="", eport=40001,
             eport_range=(32768, 60999))
    lines = show.summary(res, port=29400, expect=3, partial=[half], partial_fix=["sudo iptables -I INPUT ..."],
                         missing=0, probe_cmd="ddpdoctor network --master node1 --port 29400")
    assert lines[0] == "1 worker(s) reached both ports of 3 expected in 6.0 s (timed out)"
    assert lines[1] == "✓ node2 from 198.18.0.2 via eth0"
    # from the listener, a dropped ephemeral port and a peer that never tried it look alike (issue 21):
    # the worker's own probe decides, and the iptables line comes only under that condition
    assert lines[2].startswith("? node3 from 198.18.0.3 reached port 29400 but never came to ephemeral port 40001")
    assert lines[3] == "    decide: run `ddpdoctor network --master node1 --port 29400` on node3: it names a dropped port"
    assert lines[4] == "    if it does: sudo iptables -I INPUT ..."
    none = NS(workers=[], duration_s=1.0, timed_out=True, interrupted="SIGTERM", eport=1, eport_range=(1, 2))
    (head, tail) = show.summary(none, port=29400, expect=None, partial=[], partial_fix=[], missing=-1,
                                probe_cmd="ddpdoctor network --master node1 --port 29400")
    assert head.endswith("(timed out) (stopped by SIGTERM)") and tail.startswith("✗ no worker arrived")


@pytest.mark.torchjob
def test_a_bulk_probe_still_in_flight_when_the_last_worker_completes_is_in_the_report():
    """The worker's path-MTU probe (BULK, DD110) runs beside its handshake: when the ephemeral port completes the
    expected worker while the bulk transfer is still going, the listener lets it finish (DRAIN_S) and reports it,
    instead of stopping with the worker's bulk list empty (a lab flake under load showed that)."""
    port, out, t = _listening()
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(b"DDPDOCTOR/1 BULK worker7 65536 3000\n")
        assert s.recv(64).startswith(b"DDPDOCTOR/1 READY")
        h = handshake.hello("127.0.0.1", port, "worker7", timeout=2)        # the worker completes both ports
        assert handshake.ephemeral("127.0.0.1", h.eport, "worker7", timeout=2).state == sockets.OPEN
        time.sleep(0.3)                                                        # while its bulk is half-way
        s.sendall(b"x" * 65536)
        got = b""
        while b"\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        assert got.startswith(b"DDPDOCTOR/1 GOT 65536 "), got[:80]
    finally:
        s.close()
    t.join(8)
    (w,) = out["r"].workers
    assert w.complete and [b["bytes"] for b in w.bulk] == [65536], w.bulk
