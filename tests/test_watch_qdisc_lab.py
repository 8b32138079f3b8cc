"""`watch` reads a node's egress shapers over rtnetlink (watch/sample.py netlink_qdiscs, ≈0.1 ms) instead of
running `tc -s -j qdisc show` (≈4 ms of CPU) every 5 s: on a real lab node with a real token-bucket limit
that is delaying real packets, it must give what `tc` gives (kind, device, rate, overlimits, drops)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import json, socket, sys, time
sys.path.insert(0, {repo!r})
from ddpdoctor.watch import sample
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(2000):
    s.sendto(b"x" * 1200, ({peer!r}, 9))
time.sleep(0.5)   # the bucket drains: the counters stand still while both read them ...
for _ in range(10):  # ... unless a stray packet (an ARP reply: 42 bytes) passes between the reads: read again
    before, tc, after = sample.netlink_qdiscs(), sample._tc_qdiscs(5), sample.netlink_qdiscs()
    if before == after:
        break
    time.sleep(0.3)
print(json.dumps({{"netlink": after, "tc": tc, "qdiscs": sample.qdiscs()}}))
"""


def test_a_tbf_delaying_packets_reads_the_same_over_netlink_as_from_tc(make_lab):
    lab = make_lab(("node1", "node2"))
    lab.run("node1", ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "4mbit", "burst", "16kb",
                      "latency", "200ms"], timeout=15)
    out = lab.run("node1", [sys.executable, "-c", PROBE.format(repo=str(REPO), peer=lab.addr("node2"))], timeout=60)
    got = json.loads(out.stdout)
    tc = {(q["dev"], q["kind"]): q for q in got["tc"]}
    nl = {(q["dev"], q["kind"]): q for q in got["netlink"]}
    assert set(nl) == set(tc)
    t, n = tc[("eth0", "tbf")], nl[("eth0", "tbf")]
    assert t["overlimits"] > 0   # the limit really delayed packets
    for k in ("bytes", "drops", "overlimits", "backlog"):
        assert n[k] == t[k], (k, n, t)
    assert n["options"]["rate"] == t["options"]["rate"] == 500000   # 4 Mbit/s in bytes a second
    assert got["qdiscs"]["eth0"]["kind"] == "tbf" and got["qdiscs"]["eth0"]["rate"] == 500000
