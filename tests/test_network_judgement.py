"""Facts -> findings for `network`, with plain data (the lab tests prove the facts on real hosts)."""
import socket
import subprocess

import pytest

from ddpdoctor import registry
from ddpdoctor.probes.handshake import Hello
from ddpdoctor.model import Severity, Status
from ddpdoctor.facts.network import NetworkFacts
from ddpdoctor.probes.dns import Resolution
from ddpdoctor.probes.nics import Nic
from ddpdoctor.probes.sockets import FILTERED, OPEN, REFUSED, Route, TcpProbe
from ddpdoctor.runner import run_checks

LO = Nic("lo", True, ("127.0.0.1",), ("::1",), 65536, 0)
ETH0 = Nic("eth0", True, ("198.18.1.2",), (), 1500, 0)
DECOY = Nic("decoy0", True, ("198.18.200.2",), (), 1500, 0)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Judgement tests judge the facts they seed: any fact left unseeded that would resolve a name,
    open a socket or run a tool (ping) fails the test instead of doing real I/O on this host."""
    calls = []

    def refuse(name):
        def call(*a, **k):  # a probe may swallow the error into a fact: the list below still tells
            calls.append((name, a[:2]))
            raise AssertionError(f"an unseeded fact did real I/O: {name}{a[:2]}")
        return call
    for name in ("socket", "getaddrinfo", "gethostbyaddr", "gethostbyname", "gethostbyname_ex", "create_connection",
                 "gethostname", "getfqdn"):
        monkeypatch.setattr(socket, name, refuse(f"socket.{name}"))
    monkeypatch.setattr(subprocess, "run", refuse("subprocess.run"))
    monkeypatch.setattr(subprocess, "Popen", refuse("subprocess.Popen"))
    yield
    assert not calls, f"unseeded facts did real I/O: {calls}"


def facts(env=None, **seed):
    f = NetworkFacts("node1", 29400, env=env or {}, hostname="node2")
    base = dict(
        nics=[LO, ETH0],
        local_res=Resolution("node2", ("198.18.1.2",)),
        fqdn="node2",
        master_res=Resolution("node1", ("198.18.1.1",)),
        route=Route("198.18.1.1", "198.18.1.2"),
        tcp=TcpProbe("198.18.1.1", 29400, OPEN, 0.001),
        hello=Hello(True, "node1", 40000, (32768, 60999)),
        ephemeral=TcpProbe("198.18.1.1", 40000, OPEN, 0.001),
    )
    base.update(seed)
    f.__dict__.update(base)
    return f


def run(ctx, *ids):
    res = run_checks([registry.get(i) for i in ids], ctx, deadline=5)
    return {r.id: r for r in res}


def test_healthy_worker_has_no_warnings():
    res = run(facts(), "DD102", "DD103", "DD104", "DD201", "DD202", "DD203", "DD205", "DD303", "DD304")
    assert all(r.status is Status.PASS for r in res.values()), {i: r.findings for i, r in res.items()}


def test_hostname_on_loopback_recommends_gloo_ifname():
    r = run(facts(local_res=Resolution("node2", ("127.0.1.1",))), "DD202", "DD303")
    (f,) = r["DD202"].findings
    assert f.severity is Severity.ERROR and "127.0.1.1" in f.message
    assert f.fix.env == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "=eth0"}
    assert r["DD303"].status is Status.FAIL


def test_hostname_on_a_decoy_interface_is_caught_with_the_route_interface_as_fix():
    r = run(facts(nics=[LO, ETH0, DECOY], local_res=Resolution("node2", ("198.18.200.2",))), "DD303", "DD203")
    (f,) = r["DD303"].findings
    assert f.severity is Severity.ERROR and "decoy0" in f.message and "eth0" in f.message
    assert f.fix.env == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert r["DD203"].status is Status.PASS  # it *is* a local address: only the interface is wrong


def test_nccl_ifname_typo_and_gloo_with_nccl_syntax():
    r = run(facts(env={"NCCL_SOCKET_IFNAME": "eht0", "GLOO_SOCKET_IFNAME": "^lo"}), "DD301", "DD302")
    assert "selects no interface" in r["DD301"].findings[0].message
    assert r["DD301"].findings[0].fix.env == {"NCCL_SOCKET_IFNAME": "=eth0"}
    assert "NCCL's syntax" in r["DD302"].findings[0].message
    assert r["DD302"].findings[0].fix.env == {"GLOO_SOCKET_IFNAME": "eth0"}


def test_spaces_in_an_ifname_list_are_kept_by_nccl_and_torch_so_the_name_selects_nothing():
    r = run(facts(env={"NCCL_SOCKET_IFNAME": "eth0, eth1", "GLOO_SOCKET_IFNAME": "eth0, eth1"}), "DD301", "DD302")
    (n,) = r["DD301"].findings
    assert n.kind == "spaces" and n.severity is Severity.WARNING and "' eth1'" in n.message
    assert n.fix.env == {"NCCL_SOCKET_IFNAME": "eth0,eth1"}
    (g,) = r["DD302"].findings
    assert g.kind == "spaces" and g.severity is Severity.ERROR and "Unable to find address for:  eth1" in g.message
    assert g.fix.env == {"GLOO_SOCKET_IFNAME": "eth0,eth1"}
    assert run(facts(env={"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}), "DD301", "DD302")["DD302"].status is Status.PASS


def test_gloo_ifname_missing_interface():
    r = run(facts(env={"GLOO_SOCKET_IFNAME": "eth9"}), "DD302")
    (f,) = r["DD302"].findings
    assert "'eth9', which is missing" in f.message


def test_rendezvous_port_states():
    r = run(facts(tcp=TcpProbe("198.18.1.1", 29400, FILTERED, 2.0, "timed out")), "DD102", "DD103")
    assert "silently drops" in r["DD102"].findings[0].message
    assert r["DD103"].status is Status.SKIP
    r = run(facts(tcp=TcpProbe("198.18.1.1", 29400, REFUSED, 0.001)), "DD102")
    assert "connection refused" in r["DD102"].findings[0].message


def test_ephemeral_dropped_while_rendezvous_open_names_the_range():
    r = run(facts(ephemeral=TcpProbe("198.18.1.1", 40000, FILTERED, 2.0)), "DD103")
    (f,) = r["DD103"].findings
    assert f.severity is Severity.ERROR and "40000" in f.message
    assert any("32768:60999" in c for c in f.fix.commands)


def test_unresolvable_master_and_hostname():
    r = run(facts(master_res=Resolution("node1", (), "Name or service not known")), "DD205", "DD102", "DD303")
    assert r["DD205"].status is Status.FAIL and r["DD102"].status is Status.SKIP
    r = run(facts(local_res=Resolution("node2", (), "Name or service not known")), "DD201", "DD303")
    assert r["DD201"].status is Status.FAIL
    assert r["DD303"].status is Status.FAIL and "loopback" in r["DD303"].findings[0].message


def test_nccl_conf_is_a_shared_fact_network_judges_too(tmp_path):
    """NCCL reads NCCL_* settings from NCCL_CONF_FILE, else ~/.nccl.conf, then /etc/nccl.conf; the
    environment wins. `network` judges what NCCL will see, like `prolog` does."""
    from ddpdoctor.facts.network import nccl_conf_paths
    conf = tmp_path / "nccl.conf"
    conf.write_text("# site settings\nNCCL_SOCKET_IFNAME=eht0\nNCCL_IB_DISABLE=1\n")
    assert nccl_conf_paths({"NCCL_CONF_FILE": str(conf)}) == (str(conf),)
    assert nccl_conf_paths({"HOME": "/home/u"}) == ("/home/u/.nccl.conf", "/etc/nccl.conf")
    f = NetworkFacts("node1", 29400, env={}, hostname="node2", nccl_conf=(str(conf),))
    assert f.env["NCCL_SOCKET_IFNAME"] == "eht0" and f.nccl_conf == {"NCCL_SOCKET_IFNAME": "eht0", "NCCL_IB_DISABLE": "1"}
    seeds = {k: v for k, v in facts().__dict__.items()
             if k in ("nics", "local_res", "fqdn", "master_res", "route", "tcp", "hello", "ephemeral")}
    f.__dict__.update(seeds)
    assert run(f, "DD301")["DD301"].status is Status.FAIL  # the typo in the file is caught
    g = NetworkFacts("node1", 29400, env={"NCCL_SOCKET_IFNAME": "=eth0"}, hostname="node2", nccl_conf=(str(conf),))
    g.__dict__.update(seeds)
    assert g.env["NCCL_SOCKET_IFNAME"] == "=eth0"  # the environment wins over the file
    assert run(g, "DD301")["DD301"].status is Status.PASS
