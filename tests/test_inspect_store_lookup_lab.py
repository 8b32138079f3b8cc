"""`inspect`'s debug-server reads look the job's store up with a deadline (ddpdoctor/inspect/debugserver.py).

A lab node whose resolver never answers: its nsswitch asks DNS for names (`hosts: files dns`) and its
resolv.conf names node2, which drops DNS queries silently (iptables: a DNS server that is down behind a
firewall), `options timeout:20 attempts:2`: glibc then waits 20 s a try, twice, before getaddrinfo gives up. In the
node, a process with a thread named `pt_workerserver` (what torch's worker server names its thread, and what
inspect looks for) whose environment names that store (`MASTER_ADDR`): /proc shows no listener of the
server, so inspect reads the store for the URL — and must give the name up after its timeout, not glibc's.
"""
from __future__ import annotations

import json
import sys

import pytest

from lab import REPO_ROOT

pytestmark = pytest.mark.lab

PROBE = r"""
import ctypes, json, os, threading, time
from ddpdoctor.inspect import debugserver

def serve():
    ctypes.CDLL(None).prctl(15, b"pt_workerserver", 0, 0, 0)   # PR_SET_NAME, as WorkerServer.cpp names its thread
    time.sleep(3600)

threading.Thread(target=serve, daemon=True).start()
time.sleep(0.3)
rank = {"rank": 0, "pid": os.getpid(),
        "env": {"MASTER_ADDR": "store.dns-down.lab", "MASTER_PORT": "29500", "WORLD_SIZE": "2"}}
t0 = time.monotonic()
got = debugserver.flight_recorder([rank], timeout=1.0)
print(json.dumps({"took": time.monotonic() - t0, "got": got}), flush=True)
"""


def test_a_store_name_no_resolver_answers_for_is_given_up_after_inspects_timeout(lab):
    node = lab.node("node1")
    # node2 drops DNS queries without a word (no ICMP port unreachable, which would end the lookup at once)
    lab.run("node2", ["iptables", "-A", "INPUT", "-p", "udp", "--dport", "53", "-j", "DROP"], timeout=15, check=True)
    (node.etc_dir / "nsswitch.conf").write_text("hosts: files dns\n")
    (node.etc_dir / "resolv.conf").write_text(f"nameserver {lab.addr('node2')}\noptions timeout:20 attempts:2\n")
    cp = lab.run("node1", [sys.executable, "-P", "-c", PROBE], timeout=150, env={"PYTHONPATH": str(REPO_ROOT)})
    assert cp.returncode == 0, cp.stderr[-2000:]
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    print(f"gave up in {out['took']:.1f} s: {out['got']}")
    assert out["took"] <= 6.0, out   # its own 1 s, not glibc's 2 x 20 s
    assert "the job's store host store.dns-down.lab (MASTER_ADDR) did not resolve: resolver gave no answer within 1 s" \
        in out["got"]["error"], out
