"""Lab: a slow or unanswering DNS server must never make the prolog drain a node (issue 10).

Each node gets `hosts: files dns` and a resolv.conf pointing at 127.0.0.1 inside its own network
namespace, where tests/dnsresponder.py answers after a delay, or where iptables drops port 53.
The node's own name is NOT in its /etc/hosts, so every lookup goes through that resolver.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


DD = [sys.executable, "-m", "ddpdoctor"]
RESPONDER = str(Path(__file__).resolve().parent / "dnsresponder.py")
ENV = {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def _use_dns(lab, node: str, *, timeout: int = 5) -> None:
    """Point `node` at a DNS server on its own loopback; names not in /etc/hosts go there."""
    etc = lab.node(node).etc_dir
    # rewrite in place: these files are bind mounts into the node's mount namespace
    for fname, text in (("nsswitch.conf", "hosts: files dns\n"),
                        ("resolv.conf", f"nameserver 127.0.0.1\noptions timeout:{timeout} attempts:1\n")):
        with open(etc / fname, "r+") as f:
            f.seek(0)
            f.write(text)
            f.truncate()
    lab.set_hosts(node, {})  # only localhost: node1 itself must come from DNS


def _start_responder(lab, node: str, delay: float, rcode: str = "noerror"):
    names = [f"{n}={lab.addr(n)}" for n in lab.names]
    p = lab.popen(node, [sys.executable, RESPONDER, "--delay", str(delay), "--rcode", rcode, *names],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.strip() == "ready", p.stderr.read()
    return p


def _prolog(lab, node="node1", *extra):
    cp = lab.run(node, [*DD, "prolog", "--json", "--select", "DD2", *extra], env=ENV, timeout=30)
    return cp, json.loads(cp.stdout)


def _network(lab, node="node1"):
    cp = lab.run(node, [*DD, "network", "--master", node, "--port", "29400", "--json", "--select", "DD2"],
                 env=ENV, timeout=30)
    return cp, json.loads(cp.stdout)


def _messages(report) -> str:
    return "\n".join(f["message"] for r in report["results"] for f in r["findings"])


def _statuses(report):
    return {r["id"]: r["status"] for r in report["results"]}


def test_resolver_that_answers_in_1_3_s_warns_and_never_drains(make_lab):
    lab = make_lab(("node1",))
    _use_dns(lab, "node1")
    _start_responder(lab, "node1", delay=1.3)
    # the resolver really is slow and really works
    probe = lab.run("node1", ["getent", "ahostsv4", "node1"], timeout=20)
    assert lab.addr("node1") in probe.stdout

    cp, rep = _prolog(lab)
    st = _statuses(rep)
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    assert st["DD201"] == "pass", rep
    assert st["DD207"] == "warn", rep
    assert "does not resolve" not in _messages(rep) + cp.stderr

    ncp, nrep = _network(lab)
    nst = _statuses(nrep)
    assert nst["DD201"] == st["DD201"] and nst["DD207"] == st["DD207"]


def test_resolver_that_drops_port_53_is_a_warning_not_does_not_resolve(make_lab, tmp_path):
    lab = make_lab(("node1",))
    _use_dns(lab, "node1", timeout=5)
    _start_responder(lab, "node1", delay=0)
    lab.iptables("node1", "-A", "INPUT", "-p", "udp", "--dport", "53", "-j", "DROP")
    lab.iptables("node1", "-A", "INPUT", "-p", "tcp", "--dport", "53", "-j", "DROP")

    cp, rep = _prolog(lab)
    st = _statuses(rep)
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    assert rep["prolog"]["faults"] == []
    assert st["DD201"] == "warn", rep
    # finding messages and stderr only: stdout (the JSON) holds check titles such as DD204's
    assert "does not resolve" not in _messages(rep) + cp.stderr
    assert "no answer" in json.dumps(rep)

    ncp, nrep = _network(lab)
    nst = _statuses(nrep)
    assert ncp.returncode == 0, (ncp.stdout, ncp.stderr)
    assert nst["DD201"] == "warn" and nst["DD207"] == st["DD207"] == "warn"

    # the site can say otherwise: drain_on_timeout counts an unanswering resolver as a node fault
    conf = tmp_path / "ddpdoctor-strict.toml"
    conf.write_text("[prolog]\ndrain_on_timeout = true\n")
    cp2, rep2 = _prolog(lab, "node1", "--config", str(conf))
    assert cp2.returncode == 1 and rep2["prolog"]["faults"], (cp2.stdout, cp2.stderr)


def test_a_real_negative_answer_still_fails(make_lab):
    lab = make_lab(("node1", "node2"))
    _use_dns(lab, "node1")
    # the DNS server knows only node2: node1 gets NXDOMAIN fast
    p = lab.popen("node1", [sys.executable, RESPONDER, f"node2={lab.addr('node2')}"],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    cp, rep = _prolog(lab)
    assert cp.returncode == 1, (cp.stdout, cp.stderr)
    assert "does not resolve" in cp.stderr + cp.stdout


@pytest.mark.parametrize("rcode", ["servfail", "refused"])
def test_a_failing_resolver_is_a_warning_and_never_drains(make_lab, rcode):
    """Issue 21: SERVFAIL (or REFUSED) from the DNS server is glibc's EAI_AGAIN, a temporary failure:
    one DNS outage must not drain every node whose prolog runs during it."""
    lab = make_lab(("node1",))
    _use_dns(lab, "node1")
    _start_responder(lab, "node1", delay=0, rcode=rcode)
    probe = lab.run("node1", [sys.executable, "-c", "import socket\ntry: socket.getaddrinfo('node1', None)\n"
                              "except socket.gaierror as e: print(e.errno)"], timeout=20)
    assert probe.stdout.strip() not in ("-2", "-5", ""), probe.stdout  # the resolver really fails, not NXDOMAIN

    cp, rep = _prolog(lab)
    assert cp.returncode == 0, (cp.stdout, cp.stderr)
    assert rep["prolog"]["faults"] == []
    assert _statuses(rep)["DD201"] == "warn", rep
    assert "does not resolve" not in _messages(rep) + cp.stderr
