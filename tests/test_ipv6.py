"""IPv6 endpoints: validation, torchrun's endpoint parsing, the env audit, and DD210 on plain facts."""
import socket

import pytest

from ddpdoctor import registry
from ddpdoctor.checks.env import torchrun_endpoint
from ddpdoctor.probes.handshake import Hello
from ddpdoctor.model import Severity, Status
from ddpdoctor.facts.network import NetworkFacts
from ddpdoctor.probes import dns
from ddpdoctor.probes.dns import Resolution
from ddpdoctor.probes.nics import Nic
from ddpdoctor.probes.sockets import FILTERED, OPEN, REFUSED, Route, TcpProbe
from ddpdoctor.runner import run_checks
from ddpdoctor.validate import BadInput, endpoint_text, split_endpoint, validate_host

V4, V6 = "198.18.1.1", "fd64:6470:1::1"


@pytest.mark.parametrize("value, want", [
    ("fd00::1", "fd00::1"), ("[fd00::1]", "fd00::1"), ("fe80::1%eth0", "fe80::1%eth0"),
    ("node1", "node1"), ("198.18.1.1", "198.18.1.1"),
])
def test_hosts_accepted(value, want):
    assert validate_host(value) == want


@pytest.mark.parametrize("value, words", [
    ("fe80::1", "link-local IPv6 address without a scope id"),
    ("fe80::1%a;b", "not a valid IPv6 address"),
    ("fd00::1::2", "not a valid IPv6 address"),
])
def test_hosts_refused_with_the_reason(value, words):
    with pytest.raises(BadInput, match=words):
        validate_host(value)


def test_ipv6_refused_only_where_asked():
    with pytest.raises(BadInput, match="IPv6 literal"):
        validate_host("fd00::1", allow_ipv6=False)


@pytest.mark.parametrize("value, want", [
    ("fd00::1", ("fd00::1", 29400)), ("[fd00::1]:29500", ("fd00::1", 29500)), ("[fd00::1]", ("fd00::1", 29400)),
    ("node1:29500", ("node1", 29500)), ("node1", ("node1", 29400)), ("10.0.0.1:1", ("10.0.0.1", 1)),
])
def test_split_endpoint(value, want):
    assert split_endpoint(value, 29400) == want
    assert split_endpoint(endpoint_text(*want)) == want  # what ddpdoctor writes, it reads back


@pytest.mark.torchjob  # imports torch itself (seconds): compared with torch's own parser, not a unit test's cost
def test_torchrun_endpoint_parse_matches_torch():
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint
    for ep in ("fd00::1", "[fd00::1]:29400", "[fd00::1]", "fd00::1:29400", "node1:29400", "node1"):
        host, port = torchrun_endpoint(ep)
        assert (host, int(port)) == parse_rendezvous_endpoint(ep, 29400), ep


class Env:
    def __init__(self, env):
        self.env = env


def env_findings(cid, env):
    (r,) = run_checks([registry.get(cid)], Env(env), deadline=5)
    return r.findings


def test_bare_ipv6_rdzv_endpoint_is_misread_by_torchrun():
    (f,) = env_findings("DD803", {"PET_RDZV_ENDPOINT": "fd00::1"})
    assert f.severity is Severity.ERROR and "reads host 'fd00:' port 1" in f.message
    assert f.fix.env == {"PET_RDZV_ENDPOINT": "[fd00::1]:29400"}


def test_unbracketed_ipv6_with_port_is_ambiguous():
    (f,) = env_findings("DD803", {"PET_RDZV_ENDPOINT": "fd00::1:2940"})
    assert f.severity is Severity.WARNING and "ambiguous" in f.message


def test_scope_id_in_rdzv_endpoint_is_refused_by_torchrun():
    (f,) = env_findings("DD803", {"PET_RDZV_ENDPOINT": "[fe80::1%eth0]:29400"})
    assert f.severity is Severity.ERROR and "scope id" in f.message


@pytest.mark.parametrize("ep", ["[fd00::1]:29400", "[fd00::1]", "node1:29400"])
def test_good_rdzv_endpoints_pass(ep):
    assert env_findings("DD803", {"PET_RDZV_ENDPOINT": ep}) == ()


def test_master_addr_forms():
    assert not [f for f in env_findings("DD801", {"MASTER_ADDR": "fd00::1"}) if f.severity >= Severity.WARNING]
    (f,) = env_findings("DD801", {"MASTER_ADDR": "[fd00::1]"})
    assert "brackets" in f.message
    (f,) = env_findings("DD801", {"MASTER_ADDR": "fe80::1"})
    assert "scope id" in f.message


def facts(states, order=(V6, V4)):
    f = NetworkFacts("node1", 29400, env={}, hostname="node2")
    f.__dict__.update(
        nics=[Nic("eth0", True, ("198.18.1.2",), ("fd64:6470:1::2",), 1500, 0)],
        master_res=Resolution("node1", (V4, V6)), c10d_order=Resolution("node1", tuple(order)),
        route=Route(order[0], "198.18.1.2"), hello=Hello(False),
        family_probes={a: TcpProbe(a, 29400, s, 0.001) for a, s in states.items()})
    return f


def dd210(ctx):
    (r,) = run_checks([registry.get("DD210")], ctx, deadline=5)
    return r


def test_dropped_first_family_is_an_error_naming_the_order_and_the_fix():
    r = dd210(facts({V6: FILTERED, V4: OPEN}))
    (f,) = r.findings
    assert r.status is Status.FAIL
    assert f"tries {V6} (IPv6) first" in f.message and f"never tries {V4} (IPv4)" in f.message
    assert f.fix.env == {"MASTER_ADDR": V4}
    assert any("gai.conf" in c for c in f.fix.commands)


def test_refused_first_family_is_a_warning():
    r = dd210(facts({V6: REFUSED, V4: OPEN}))
    assert r.status is Status.WARN and "moves on to" in r.findings[0].message


def test_ipv4_first_and_open_passes():
    r = dd210(facts({V6: FILTERED, V4: OPEN}, order=(V4, V6)))
    assert r.status is Status.PASS


def test_one_family_only_skips():
    ctx = facts({V4: OPEN})
    ctx.__dict__["master_res"] = Resolution("node1", (V4,))
    assert dd210(ctx).status is Status.SKIP


def test_c10d_order_on_loopback_names_follows_getaddrinfo_v4mapped():
    r = dns.c10d_order("127.0.0.1", timeout=2)
    assert r.addrs == ("127.0.0.1",)  # v4-mapped shown as IPv4
    want = socket.getaddrinfo("::1", None, socket.AF_INET6, socket.SOCK_STREAM)[0][4][0]
    assert dns.c10d_order("::1", timeout=2).addrs == (want,)
