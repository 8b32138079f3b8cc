"""NCCL and Gloo interface grammars (NCCL src/misc/socket.cc; torch ProcessGroupGloo)."""
from ddpdoctor import ifname
from ddpdoctor.probes.nics import Nic


def nic(name, v4=(), up=True, v6=()):
    return Nic(name, up, tuple(v4), tuple(v6), 1500, 0)


def test_nccl_prefix_exact_and_exclude():
    assert ifname.nccl_selects("eth", "eth0")
    assert ifname.nccl_selects("eth1", "eth10")          # prefixes: the classic surprise
    assert not ifname.nccl_selects("=eth1", "eth10")     # '=' makes it exact
    assert ifname.nccl_selects("=eth1", "eth1")
    assert not ifname.nccl_selects("^docker,lo", "docker0")
    assert ifname.nccl_selects("^docker,lo", "ens5")
    assert not ifname.nccl_selects("^=eth0", "eth0") and ifname.nccl_selects("^=eth0", "eth01")


def test_nccl_default_prefers_ib_then_skips_docker_and_lo():
    nics = [nic("lo", ["127.0.0.1"]), nic("docker0", ["172.17.0.1"]), nic("eth0", ["198.18.0.2"]), nic("ib0", ["198.19.0.2"])]
    assert ifname.nccl_default_choice(nics, {})[0].name == "ib0"
    assert ifname.nccl_default_choice(nics[:3], {})[0].name == "eth0"
    assert ifname.nccl_default_choice(nics[:2], {})[0].name == "docker0"
    assert ifname.nccl_default_choice(nics[:1], {})[0].name == "lo"


def test_nccl_ignores_up_state_and_walks_ipv4_before_ipv6():
    nics = [nic("lo", ["127.0.0.1"]), nic("eth0", v6=["fd00::2"]), nic("eth1", ["198.18.0.2"], up=False)]
    pick, rule = ifname.nccl_default_choice(nics, {})
    assert pick.name == "eth1" and rule == "^docker,lo"
    pick, _ = ifname.nccl_default_choice(nics, {"NCCL_SOCKET_FAMILY": "AF_INET6"})
    assert pick.name == "eth0"


def test_gloo_names_are_plain_and_comma_separated_with_spaces_kept_as_torch_keeps_them():
    assert ifname.parse_gloo("eth0,eth1") == ("eth0", "eth1")
    assert ifname.parse_gloo("eth0, eth1") == ("eth0", " eth1")  # c10d::split does not trim


def test_spaced_names_and_their_fix_keep_nccl_prefixes_and_ports():
    assert ifname.spaced_names("eth0, eth1") == (" eth1",)
    assert ifname.spaced_names("eth0,eth1") == ()
    assert ifname.spaced_names("^ lo, docker") == (" lo", " docker")
    assert ifname.without_spaces("^ lo, docker") == "^lo,docker"
    assert ifname.without_spaces("= eth0 ,ib0:1") == "=eth0,ib0:1"
    eth0, eth1 = nic("eth0", ["198.18.0.2"]), nic("eth1", ["198.18.2.2"])
    assert ifname.nccl_matches("eth0, eth1", [eth0, eth1]) == [eth0]  # NCCL drops " eth1"
    assert ifname.nccl_exact(["eth0"]) == "=eth0"
