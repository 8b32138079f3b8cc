"""The records `cluster` nodes exchange (facts/noderecord.py): what a node publishes reads back as the
same record, and a record that another version or a damaged store value made unreadable is named by
DD711, field and all, instead of crashing the first node (issue 20)."""
from __future__ import annotations

import pytest

import golden
from ddpdoctor import registry, runner
from ddpdoctor.facts.cluster import ClusterView
from ddpdoctor.facts.noderecord import (Hello, LocalResult, MalformedRecord, NodeRecord, PairingRounds, PairSide,
                                        PeerProbe, PortProbe, round2_from_wire)
from ddpdoctor.model import Status

from test_cluster_golden import record


def _full_record() -> NodeRecord:
    probe = PeerProbe("node2", ("10.0.0.2",), "", 0.4, False, "10.0.0.2", PortProbe("open", 0.3, "", True, "node2"),
                      PortProbe("filtered", 2000.0, "timed out", port=40001))
    local = LocalResult.from_wire({"id": "DD601", "title": "shm", "category": "system", "status": "fail",
                                   "duration_s": 0.0, "findings": [{"severity": "error", "message": "small",
                                                                    "hint": "", "evidence": {},
                                                                    "fix": {"summary": "s", "commands": ["c"], "env": {}}}]})
    return NodeRecord(0, "node1", "node1", ("10.0.0.1",), {"10.0.0.1": 9000}, 29400, "", 40000, (32768, 60999),
                      versions={"torch": "2.13.0"}, settings={"NCCL_IB_DISABLE": "1"}, env={"OMP_NUM_THREADS": "4"},
                      peers=(1,), probes={1: probe}, local=(local,), timing={"total_s": 1.2},
                      pairs1={1: PairSide(True, 0.01, "ok", {"complete": True}, {"ok": True, "seconds": 0.02})},
                      incoming=({"from": "node2", "addr": "10.0.0.2", "port": 29400},),
                      pairing=PairingRounds(((0, 1, True, 0.03, ""),), (), (), (), (), (), 2, 1))


def test_a_record_reads_back_as_itself_through_json():
    rec = _full_record()
    back = NodeRecord.from_wire(golden.wire(rec.to_wire()), 0)
    assert back.malformed == "" and back == rec
    assert Hello.from_wire(golden.wire(Hello.to_wire(rec))) == Hello(**{k: getattr(rec, k) for k in (
        "index", "node", "hostname", "addrs", "addr_mtu", "port", "port_error", "eport", "eport_range")})


def _with(path: str, value):
    """A healthy wire record of node 2 with one field replaced (path "probes.0.rdzv")."""
    rec = golden.wire(record(1, 3))
    *parents, last = path.split(".")
    d = rec
    for p in parents:
        d = d[p]
    d[last] = value
    return rec


@pytest.mark.parametrize("wire,why", [
    (["not", "an", "object"], "want a JSON object"),
    (_with("probes", {"zero": {}}), "probes: 'zero' is not a node index"),
    (_with("probes.0.rdzv", "open"), "probes.0.rdzv: want an object"),
    (_with("probes.0.addr", 10), "probes.0.addr: want a string"),
    (_with("versions", {"torch": 2.13}), "versions: want an object of strings"),
    (_with("eport_range", [1]), "eport_range: want [lo, hi]"),
    (_with("timing", {"total_s": "slow"}), "timing: want an object of seconds"),
    (_with("index", 2), "index: 2 published under node 1's key"),
    (_with("local", [{"id": "DD601", "status": "fail", "findings": "none"}]), "findings: want a list"),
])
def test_a_malformed_record_is_named_by_dd711_and_does_not_crash(wire, why):
    recs = {0: record(0, 3), 1: wire, 2: record(2, 3)}
    view = ClusterView(recs, 3, port=29400, store="node1:29401")
    assert view.malformed == {1: view.records[1].malformed} and why in view.records[1].malformed
    results = {r.id: r for r in runner.run_checks(registry.select("cluster"), view, deadline=10)}
    assert {r.status for r in results.values()} <= {Status.PASS, Status.FAIL, Status.WARN, Status.SKIP}
    (f,) = results["DD711"].findings
    assert f.message.startswith("node2 published a record ddpdoctor cannot read (") and why in f.message
    assert view.failing() == [1]


def test_round_two_results_are_checked_too():
    probes2, pairs2 = round2_from_wire({"probes2": {"3": {"name": "node4", "addr": "10.0.0.4"}},
                                        "pairs2": {"3": {"ok": True, "seconds": 0.1, "cell": "ok"}}})
    assert probes2[3].addr == "10.0.0.4" and pairs2[3].ok
    with pytest.raises(MalformedRecord, match="pairs2.3.ok: want true or false"):
        round2_from_wire({"pairs2": {"3": {"ok": "yes"}}})


@pytest.mark.torchjob
def test_the_first_node_gathers_unreadable_values_as_records_that_say_why():
    """Through c10d's real TCPStore, as the first node reads it (cluster/store.py)."""
    import datetime
    import json

    from torch.distributed import TCPStore

    from ddpdoctor.cluster.store import gather, read_hello
    store = TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=5), wait_for_workers=False)
    store.set("result/0", json.dumps(record(0, 4)))
    store.set("result/1", b"\xff\xfe not json")
    store.set("result/2", json.dumps({**record(2, 4), "probes": []}))
    store.set("hello/3", json.dumps({k: record(3, 4)[k] for k in ("index", "node", "hostname", "addrs", "port")}))
    store.set("hello/1", "[1, 2")
    store.set("results", "4")
    got = gather(store, 4, until=0)
    assert got[0].malformed == "" and got[0].node == "node1"
    assert got[1].malformed.startswith("result/1 is not JSON")
    assert got[2].malformed == "probes: want an object, got []"
    assert got[3].unfinished and got[3].node == "node4" and got[3].missing
    assert read_hello(store, 3).node == "node4" and read_hello(store, 1) is None
