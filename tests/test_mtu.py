"""Path MTU: DD110/DD111 judgement on plain facts, and the BULK protocol on real loopback sockets."""
import socket
import threading

import pytest

from ddpdoctor import registry
from ddpdoctor.probes.handshake import Hello
from ddpdoctor.peerprobe.server import ProbeServer
from ddpdoctor.model import Severity, Status
from ddpdoctor.facts.network import NetworkFacts, PathMtu
from ddpdoctor.probes import pathmtu
from ddpdoctor.probes.dns import Resolution
from ddpdoctor.probes.nics import Nic
from ddpdoctor.probes.pathmtu import Bulk, Sweep
from ddpdoctor.probes.sockets import OPEN, Route, TcpProbe
from ddpdoctor.runner import run_checks
from ports import free_port

MiB = 1 << 20
ETH0 = Nic("eth0", True, ("198.18.1.2",), (), 9000, 0)


def facts(pm):
    f = NetworkFacts("node1", 29400, env={}, hostname="node2")
    f.__dict__.update(nics=[ETH0], master_res=Resolution("node1", ("198.18.1.1",)),
                      route=Route("198.18.1.1", "198.18.1.2"), tcp=TcpProbe("198.18.1.1", 29400, OPEN, 0.001),
                      hello=Hello(True, "node1", 40000, (32768, 60999)), path_mtu=pm)
    return f


def run(pm, *ids):
    return {r.id: r for r in run_checks([registry.get(i) for i in ids], facts(pm), deadline=5)}


def bulk(sent, back, mss=None, peer_mtu=9000):
    return Bulk(True, MiB, mss, sent, back, 1.5 if sent < MiB else 0.01, 1.5 if back < MiB else 0.01, "eth0", peer_mtu)


SWEEP_1500 = Sweep(True, 1500, 1560, {1500: True, 1560: False, 9000: False})


def test_nothing_of_full_frames_but_all_of_1500_is_a_black_hole_with_the_sizes_and_the_fix():
    r = run(PathMtu("eth0", 9000, bulk(0, 0), bulk(MiB, MiB, mss=1460), SWEEP_1500), "DD110", "DD111")
    (f,) = r["DD110"].findings
    assert r["DD110"].status is Status.FAIL and f.severity is Severity.ERROR
    assert "black hole between node2 (eth0 MTU 9000) and node1 (eth0 MTU 9000)" in f.message
    assert "largest packet that passes: 1500 bytes, 1560 is lost" in f.message
    assert "sudo ip link set eth0 mtu 1500   # on node2" in f.fix.commands
    assert "SOCKET_IFNAME" in f.fix.summary
    assert r["DD111"].status is Status.PASS


def test_one_way_black_hole_names_the_direction():
    r = run(PathMtu("eth0", 9000, bulk(MiB, 0), bulk(MiB, MiB, mss=1460), SWEEP_1500), "DD110")
    assert "vanish from the master" in r["DD110"].findings[0].message


def test_a_slow_link_is_not_called_a_black_hole():
    r = run(PathMtu("eth0", 9000, bulk(300_000, 200_000), bulk(MiB, MiB, mss=1460), SWEEP_1500), "DD110")
    (f,) = r["DD110"].findings
    assert f.severity is Severity.WARNING and "slow link" in f.message and "not an MTU black hole" in f.message


def test_a_stall_at_every_size_is_not_blamed_on_the_mtu():
    r = run(PathMtu("eth0", 9000, bulk(0, 0), bulk(0, 0, mss=1460), SWEEP_1500), "DD110")
    (f,) = r["DD110"].findings
    assert f.severity is Severity.WARNING and "not the packet size" in f.message and "low confidence" in f.hint


def test_healthy_path_passes_with_the_largest_df_packet():
    r = run(PathMtu("eth0", 9000, bulk(MiB, MiB), bulk(MiB, MiB, mss=1460), Sweep(True, 9000, None, {9000: True})),
            "DD110")
    assert r["DD110"].status is Status.PASS
    assert "largest don't-fragment packet 9000 bytes" in r["DD110"].findings[0].message


def test_mtu_mismatch_with_the_master_warns_and_names_both():
    r = run(PathMtu("eth0", 9000, bulk(MiB, MiB, peer_mtu=1500), None, None), "DD111")
    (f,) = r["DD111"].findings
    assert f.severity is Severity.WARNING
    assert "node2 eth0 has MTU 9000, node1 eth0 has 1500" in f.message


def test_old_listener_without_bulk_skips():
    r = run(PathMtu("eth0", 9000, Bulk(False, MiB, error="no answer to BULK"), None, None), "DD110", "DD111")
    assert r["DD110"].status is Status.SKIP and r["DD111"].status is Status.SKIP




@pytest.mark.torchjob
def test_bulk_round_trip_against_the_real_probe_server_reports_its_mtu():
    port = free_port()
    events = []
    server = ProbeServer(port, "node1", on_event=events.append)
    try:
        b = pathmtu.bulk("127.0.0.1", port, "node2", nbytes=MiB, deadline_s=5)
        c = pathmtu.bulk("127.0.0.1", port, "node2", nbytes=MiB, deadline_s=5, mss=1000)
    finally:
        server.close()
    lo_mtu = [n.mtu for n in server._nics if n.name == "lo"][0]
    assert b.complete and c.complete, (b, c)
    assert b.peer_if == "lo" and b.peer_mtu == lo_mtu
    assert [e["bytes"] for e in events if e["port"] == "bulk"] == [MiB, MiB]


@pytest.mark.torchjob
def test_bulk_against_a_service_that_is_not_ddpdoctor_is_unsupported_not_a_hang():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def mute():
        conn, _ = srv.accept()
        conn.recv(100)
        conn.close()

    t = threading.Thread(target=mute, daemon=True)
    t.start()
    try:
        b = pathmtu.bulk("127.0.0.1", port, "node2", deadline_s=1, connect_timeout=1)
    finally:
        srv.close()
    assert not b.supported and "older" in b.error


def test_listener_caps_what_a_stranger_may_ask():
    a, b = socket.socketpair()
    try:
        t = threading.Thread(target=lambda: pathmtu.serve_bulk(b, ["DDPDOCTOR/1", "BULK", "x", "999999999999", "99999999"],
                                                                ifname="eth0", mtu=1500), daemon=True)
        t.start()
        assert a.recv(100).startswith(b"DDPDOCTOR/1 READY")
        a.close()  # the worker goes away: the listener stops at once instead of waiting 10 s
        t.join(3)
        assert not t.is_alive()
    finally:
        b.close()
    assert pathmtu.serve_bulk(b, ["DDPDOCTOR/1", "BULK", "x", "-1", "1"], ifname="eth0", mtu=1500) is None


def test_cluster_names_the_node_whose_mtu_differs_from_the_majority():
    from test_cluster_view import addr, judge, record, view
    n = 5
    recs = {i: record(i, n) for i in range(n)}
    for i in range(n):
        recs[i]["addr_mtu"] = {addr(i): 9000, "172.17.0.1": 1500}  # a docker bridge does not count
    recs[3]["addr_mtu"] = {addr(3): 1500}
    res = judge(view(recs, n))
    (f,) = res["DD719"].findings
    assert res["DD719"].status is Status.WARN
    assert f.message == "MTU differs across nodes: 9000 on node[1-3,5]; 1500 on node4"
    assert "node4" in f.hint and "9000" in f.fix.summary


def test_cluster_with_one_mtu_passes():
    from test_cluster_view import judge, record, view
    n = 3
    res = judge(view({i: record(i, n) for i in range(n)}, n))
    assert res["DD719"].status is Status.PASS and res["DD719"].findings[0].message == "MTU 1500 on all 3 nodes"
