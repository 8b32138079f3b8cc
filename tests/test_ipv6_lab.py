"""IPv6 in the 2-node lab (ULA addresses next to the IPv4 ones, faults with ip6tables).

* `network --master` takes `fd00::1` and `[fd00::1]:29400` and probes over IPv6 end to end
  (listener, handshake, ephemeral port, path MTU);
* a master name with A and AAAA records where the master's ip6tables drops the rendezvous port:
  DD210 says torch's c10d tries the IPv6 address first and hangs there; the real torchrun + Gloo job
  does hang, and passes with the fix DD210 prints (the IPv4 literal as --master-addr, or the rule gone).
"""
from __future__ import annotations

from netlab import OK_WALL, PORT, all_output, diagnose, failing, job, result, start_listener, DD

import json


def dual_stack_names(lab):
    a6 = lab.enable_ipv6()
    lines = ["127.0.0.1 localhost"] + [f"{lab.addr(n)} {n}" for n in lab.names] + [f"{a6[n]} {n}" for n in lab.names]
    for n in lab.names:
        lab.set_hosts(n, lines)
    return a6


def test_ipv6_literal_and_bracketed_endpoint_are_probed_over_ipv6(lab):
    a6 = lab.enable_ipv6()
    for master in (a6["node1"], f"[{a6['node1']}]:{PORT}"):
        lis = start_listener(lab)
        cp = lab.run("node2", [*DD, "network", "--master", master, "--json"], timeout=30)
        out, _ = lis.communicate(timeout=30)
        assert "Traceback" not in cp.stderr, cp.stderr
        report = json.loads(cp.stdout)
        assert {"DD102", "DD103", "DD110"} <= {r["id"] for r in report["results"] if r["status"] == "pass"}, report
        assert f"[{a6['node1']}]:{PORT} open" in result(report, "DD102")["findings"][0]["message"]
        (w,) = json.loads(out)["workers"]
        assert w["addr"] == a6["node2"] and w["ephemeral_port"] and w["bulk"][0]["bytes"] == 1 << 20


def test_name_with_a_and_aaaa_where_ipv6_is_dropped_hangs_torch_and_is_named(lab):
    a6 = dual_stack_names(lab)
    lab.ip6tables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "DROP")
    report, took, _ = diagnose(lab, listen_timeout=8)
    assert "DD210" in failing(report)
    (f,) = result(report, "DD210")["findings"]
    assert f"tries {a6['node1']} (IPv6) first" in f["message"] and f"never tries {lab.addr('node1')} (IPv4)" in f["message"]
    assert f["evidence"]["c10d_order"] == [a6["node1"], lab.addr("node1")]
    assert f["fix"]["env"] == {"MASTER_ADDR": lab.addr("node1")}
    assert any("ip6tables -I INPUT -p tcp --dport 29400 -j ACCEPT" in c for c in f["fix"]["commands"])
    assert took < 8
    # the real job, static rendezvous on the name: the store connect goes to IPv6 and waits there
    res = job(lab, rdzv="static", wall_timeout=30)
    assert not res.ok, res.output
    # the fix DD210 gives: the address that answers
    res = job(lab, rdzv="static", master_addr=lab.addr("node1"), wall_timeout=90)  # a job that works: room for
    assert res.ok, all_output(res)                                                    # torch's import under load


def test_name_with_a_and_aaaa_where_ipv6_is_rejected_falls_through(lab):
    dual_stack_names(lab)
    lab.ip6tables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "REJECT",
                  "--reject-with", "tcp-reset")
    report, _, _ = diagnose(lab, listen_timeout=8)
    r = result(report, "DD210")
    assert r["status"] == "warn" and "moves on to" in r["findings"][0]["message"], r
    # measured: c10d takes the refusal as "retry" and goes on to the IPv4 address at once
    assert job(lab, rdzv="static", wall_timeout=OK_WALL).ok  # a job that works: room for CI's load
