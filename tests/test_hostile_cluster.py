"""A malformed peer record in `cluster` (issue 21: exit 3 for everyone): any process that reaches the
store can write a node's record; the first node still judges the others, and that node is named
as not having reported properly, never a crash of the view, a check or the renderer."""
from __future__ import annotations

import json

import pytest

from ddpdoctor import registry, runner
from ddpdoctor.cluster.store import peer_record
from ddpdoctor.facts import cluster as cl
from ddpdoctor.model import Status
from ddpdoctor.render import cluster as show
from test_cluster_view import PORT, record

N = 3
HOSTILE = {
    "not json": b"{not json",
    "not utf-8": b"\xff\xfe{}",
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "a list": b"[1, 2, 3]",
    "a string": b'"node2"',
    "probes not a dict": json.dumps({**record(1, N), "probes": [1, 2]}).encode(),
    "probe keys not ranks": json.dumps({**record(1, N), "probes": {"x": {}, "-1": {}, "99999999999": {}}}).encode(),
    "probe values not dicts": json.dumps({**record(1, N), "probes": {"0": "open", "2": None}}).encode(),
    "probe fields of other types": json.dumps({**record(1, N), "probes": {"0": {"rdzv": "x", "eph": [1], "name": 5,
                                                                               "addrs": "a", "addr": {}}}}).encode(),
    "versions nested": json.dumps({**record(1, N), "versions": {"torch": {"a": [1]}, "nccl": [1]}}).encode(),
    "node not a string": json.dumps({**record(1, N), "node": {"x": 1}, "hostname": [1]}).encode(),
    "local not a list": json.dumps({**record(1, N), "local": {"status": "fail"}}).encode(),
    "local items odd": json.dumps({**record(1, N), "local": [{"status": "fail", "id": 5, "message": None}, 3]}).encode(),
    "timing odd": json.dumps({**record(1, N), "timing": [1], "addr_mtu": {"10.0.0.2": "x"}}).encode(),
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_a_malformed_record_is_judged_not_a_crash(what):
    records = {0: record(0, N), 2: record(2, N), 1: peer_record(HOSTILE[what], 1)}
    v = cl.ClusterView(records, N, port=PORT, store="node1:29401", elapsed_s=1.0)
    results = runner.run_checks(registry.select("cluster"), v, deadline=5)
    crashed = [(r.id, r.reason) for r in results if r.status is Status.CRASH]
    assert not crashed, crashed
    "\n".join(show.matrix(v.names, v.matrix(), PORT))
    v.failing(), v.passing()
