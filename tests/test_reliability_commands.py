"""Issue 10: what ddpdoctor suggests pasting is safe to paste, and files it writes are written safely."""
from __future__ import annotations

import shlex

from ddpdoctor import registry, runner
from ddpdoctor.render.network import env_footer
from ddpdoctor.probes.dns import Resolution


def test_env_footer_quotes_values_for_the_shell():
    text = "\n".join(env_footer({"NCCL_SOCKET_IFNAME": "eth0; touch /tmp/pwned", "GLOO_SOCKET_IFNAME": "eth0"}))
    line = [l for l in text.splitlines() if "NCCL" in l][0].strip()
    assert shlex.split(line) == ["export", "NCCL_SOCKET_IFNAME=eth0; touch /tmp/pwned"]
    assert "  export GLOO_SOCKET_IFNAME=eth0" in text


class _Route:
    ok = True
    src_addr = "198.18.4.2"


class _Nic:
    name = "eth0"
    is_loopback = False


class _Facts:
    master = "node1"
    master_addr = "198.18.4.1"
    fqdn = hostname = "evil'; touch /tmp/pwned; echo '"
    local_addrs = {"198.18.4.2"}
    route = _Route()
    route_nic = _Nic()

    def __init__(self, local):
        self.local_res = self.fqdn_res = local
        self.master_res = Resolution("node1", ("198.18.4.1",), "", 0.01)

    def prefetch(self, *names):
        pass


def _commands(facts):
    checks = [c for c in registry.select("network") if c.id in ("DD201", "DD202", "DD203", "DD207")]
    res = runner.run_checks(checks, facts, deadline=5)
    return [c for r in res for f in r.findings if f.fix for c in f.fix.commands], res


def test_a_hostile_local_hostname_never_goes_into_a_suggested_command():
    for local in (Resolution(_Facts.hostname, (), "Name or service not known (gaierror -2)", 0.01),
                  Resolution(_Facts.hostname, ("127.0.1.1",), "", 0.01),
                  Resolution(_Facts.hostname, ("10.9.9.9",), "", 0.01)):
        cmds, res = _commands(_Facts(local))
        assert any(r.status.value == "fail" for r in res)  # still judged
        assert all("pwned" not in c for c in cmds), cmds


def test_a_valid_hostname_still_gets_its_hosts_line():
    f = _Facts(Resolution("node2", (), "Name or service not known (gaierror -2)", 0.01))
    f.hostname = f.fqdn = "node2"
    cmds, _ = _commands(f)
    assert "printf '\\n%s\\n' '198.18.4.2 node2' | sudo tee -a /etc/hosts >/dev/null" in cmds
