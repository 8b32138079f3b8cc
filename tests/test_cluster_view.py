"""`ddpdoctor cluster` judgement on plain records: peers, the matrix, blame, drift, launch detection."""
from __future__ import annotations

import pytest

from ddpdoctor import registry, runner
from ddpdoctor.model import Status
from ddpdoctor.cluster import launch as cl_launch, peers as cl_peers
from ddpdoctor.facts import cluster as cl
from ddpdoctor.render import cluster as show
from ddpdoctor import hostlist
from ddpdoctor.validate import BadInput

PORT = 29400


def addr(i: int) -> str:
    return f"10.0.0.{i + 1}"


def probe(j: int, *, rdzv="open", eph="open", resolved=None, resolve_error="", answered_by=None):
    a = resolved if resolved is not None else addr(j)
    if resolve_error:
        return {"name": f"node{j + 1}", "addrs": [], "addr": None, "resolve_error": resolve_error}
    p = {"name": f"node{j + 1}", "addrs": [a], "addr": a, "resolve_error": "",
         "rdzv": {"state": rdzv, "ms": 0.3, "error": "", "ddpdoctor": rdzv == "open",
                  "answered_by": answered_by or (f"node{j + 1}" if rdzv == "open" else "")}}
    if answered_by and answered_by != f"node{j + 1}":
        p["rdzv"]["state"] = "wrong-host"
    if eph is not None:
        p["eph"] = {"state": eph, "ms": 0.3, "error": "", "port": 40000}
    return p


def record(i: int, n: int, overrides=None, *, versions=None, settings=None, local=None):
    overrides = overrides or {}
    probes = {str(j): overrides.get(j, probe(j)) for j in range(n) if j != i}
    return {"index": i, "node": f"node{i + 1}", "hostname": f"node{i + 1}", "addrs": [addr(i)], "port": PORT,
            "addr_mtu": {addr(i): 1500},
            "port_error": "", "eport": 40000, "eport_range": [32768, 60999],
            "versions": versions or {"torch": "2.13.0", "nccl": "2.21.5", "python": "3.11.7", "driver": "550.54"},
            "settings": settings or {}, "peers": [j for j in range(n) if j != i], "probes": probes,
            "local": local or [], "timing": {"total_s": 1.0}}


def view(records, n):
    return cl.ClusterView(records, n, port=PORT, store="node1:29401", elapsed_s=1.0)


def judge(v):
    results = runner.run_checks(registry.select("cluster"), v, deadline=5)
    return {r.id: r for r in results}


def test_a_healthy_cluster_passes_every_check_and_fails_no_node():
    n = 4
    v = view({i: record(i, n) for i in range(n)}, n)
    res = judge(v)
    assert {r.status for r in res.values()} == {Status.PASS}
    assert v.failing() == [] and v.label(v.passing()) == "node[1-4]"
    assert "1 node1  - ✓ ✓ ✓" in "\n".join(show.matrix(v.names, v.matrix(), PORT))


def test_a_port_dropped_between_one_pair_names_the_pair_and_blames_the_receiver():
    n = 4
    recs = {i: record(i, n) for i in range(n)}
    recs[1] = record(1, n, {2: probe(2, rdzv="filtered")})  # node2 -> node3 gets no answer
    v = view(recs, n)
    res = judge(v)
    assert res["DD713"].status is Status.FAIL
    (f,) = res["DD713"].findings
    assert f.message == "node2 → node3: port 29400: no answer: a firewall silently drops the packets"
    assert "--dport 29400 -j ACCEPT   # on node3" in f.fix.commands[0] and addr(1) in f.fix.commands[0]
    assert v.label(v.failing()) == "node3" and v.label(v.passing()) == "node[1-2,4]"
    assert v.cell(1, 2) == cl.RDZV_FAIL and v.cell(2, 1) == cl.OK
    assert {r.id for r in res.values() if r.status is Status.FAIL} == {"DD713"}


def test_a_node_nobody_reaches_is_blamed_not_its_peers():
    n = 4
    recs = {i: record(i, n, {3: probe(3, rdzv="filtered", eph="filtered")}) for i in range(3)}
    recs[3] = record(3, n)
    v = view(recs, n)
    assert v.failing() == [3]
    (f,) = judge(v)["DD713"].findings
    assert f.message.startswith("node[1-3] → node4: port 29400")


def test_ephemeral_port_dropped_while_rendezvous_port_is_open():
    n = 2
    v = view({0: record(0, n, {1: probe(1, eph="filtered")}), 1: record(1, n)}, n)
    res = judge(v)
    assert res["DD713"].status is Status.PASS and res["DD714"].status is Status.FAIL
    assert res["DD714"].findings[0].message == "node1 → node2: ephemeral port: no answer: a firewall silently drops the packets"
    assert "--dport 32768:60999" in res["DD714"].findings[0].fix.commands[0]


def test_a_missing_node_is_named_with_what_the_others_saw_of_it():
    n = 3
    cut = {2: probe(2, eph=None)}  # node3 never said hello: no ephemeral port to probe
    v = view({0: record(0, n, cut), 1: record(1, n, cut)}, n)
    res = judge(v)
    (f,) = res["DD711"].findings
    assert f.message == "node3 never reported, but its listener answered node[1-2]"
    assert "cannot reach the store at node1:29401" in f.hint
    assert v.cell(2, 0) == cl.UNKNOWN and v.failing() == [2]
    # nobody reached it either
    gone = {2: probe(2, rdzv="unreachable", eph=None)}
    v = view({0: record(0, n, gone), 1: record(1, n, gone)}, n)
    assert judge(v)["DD711"].findings[0].message == "node3 never reported, and no node reached it"


def test_names_that_resolve_differently_or_to_another_host_are_reported():
    n = 4
    recs = {i: record(i, n) for i in range(n)}
    recs[0] = record(0, n, {2: probe(2, resolved="10.9.9.9")})              # stale entry on node1
    recs[1] = record(1, n, {2: probe(2, resolve_error="Name or service not known")})
    v = view(recs, n)
    res = judge(v)
    msgs = [f.message for f in res["DD712"].findings]
    assert "node3 does not resolve on node2: Name or service not known" in msgs
    assert any(m.startswith("on node1, node3 resolves to 10.9.9.9, not one of its addresses") for m in msgs)
    (d,) = res["DD715"].findings
    assert d.message == "node3 resolves differently: 10.9.9.9 on node1; 10.0.0.3 on node4"
    # one node's entry points at another node: that node's ddpdoctor answers
    recs[1] = record(1, n, {2: probe(2, resolved=addr(0), answered_by="node1")})
    msgs = [f.message for f in judge(view(recs, n))["DD712"].findings]
    assert "on node2, node3 resolves to 10.0.0.1, where node1 answers" in msgs


def test_version_and_setting_drift_names_the_nodes():
    n = 3
    recs = {i: record(i, n, settings={"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0"}) for i in range(n)}
    recs[2] = record(2, n, versions={"torch": "2.12.0", "nccl": "2.21.5", "python": "3.11.7", "driver": "550.54"},
                     settings={"NCCL_SOCKET_IFNAME": "=ens5"})
    res = judge(view(recs, n))
    (t,) = res["DD716"].findings
    assert t.message == "torch differs across nodes: 2.13.0 on node[1-2]; 2.12.0 on node3"
    assert res["DD716"].status is Status.FAIL
    by_key = {f.evidence["key"]: f for f in res["DD717"].findings}
    assert by_key["NCCL_IB_DISABLE"].message == "NCCL_IB_DISABLE differs across nodes: 1 on node[1-2]; (unset) on node3"
    assert by_key["NCCL_IB_DISABLE"].severity.name == "WARNING"
    assert by_key["NCCL_SOCKET_IFNAME"].severity.name == "INFO"  # interface names may differ per node


def test_local_failures_are_listed_per_node_and_fail_the_node():
    n = 2
    bad = [{"id": "DD601", "status": "fail", "findings": [
        {"severity": "error", "message": "/dev/shm is 64 MiB, below the site minimum of 1 GiB", "hint": "",
         "fix": {"summary": "remount", "commands": ["mount -o remount,size=1024M /dev/shm"], "env": {}}}]}]
    v = view({0: record(0, n), 1: record(1, n, local=bad)}, n)
    (f,) = judge(v)["DD718"].findings
    assert f.message == "node2: DD601 /dev/shm is 64 MiB, below the site minimum of 1 GiB"
    assert v.failing() == [1]


def test_the_matrix_is_summarised_beyond_64_nodes():
    n = 70
    recs = {i: record(i, n, {}) for i in range(n)}
    for r in recs.values():  # bounded probing: keep only ring neighbours
        i = r["index"]
        r["probes"] = {str(j): p for j, p in r["probes"].items() if int(j) in ((i + 1) % n, (i - 1) % n)}
    recs[5]["probes"][str(6)] = probe(6, rdzv="refused")
    v = cl.ClusterView(recs, n, port=PORT)
    assert v.matrix() is None
    text = "\n".join(show.summary(n, v.summary(), v.label(v.missing)))
    assert text.splitlines()[0] == "70 nodes: 140 probes (4830 pairs), 1 failed; missing: none"
    assert "node7: unreachable from 1 node(s)" in text


@pytest.mark.parametrize("n,k", [(2, 16), (17, 16), (18, 16), (200, 16), (1000, 8)])
def test_each_node_probes_a_bounded_set_that_covers_every_node(n, k):
    sets = {i: cl_peers.peer_set(i, n, k, seed=42) for i in range(n)}
    indegree = {j: 0 for j in range(n)}
    for i, s in sets.items():
        assert i not in s and len(s) == min(k, n - 1) and len(set(s)) == len(s)
        if n - 1 > k:
            assert (i == 0 or 0 in s) and (i + 1) % n in s and (i - 1) % n in s
        for j in s:
            indegree[j] += 1
    assert min(indegree.values()) >= min(2, n - 1)
    assert cl_peers.peer_set(5 % n, n, k, seed=42) == sets[5 % n]  # reproducible from the seed


def test_launch_is_read_from_srun_and_torchrun_variables():
    srun = {"SLURM_STEP_NODELIST": "gpu[01-03]", "SLURM_JOB_NODELIST": "gpu[01-03]", "SLURMD_NODENAME": "gpu02",
            "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}
    l = cl_launch.detect_launch(srun, store_port=29401)
    assert (l.mode, l.index, l.world, l.store_host, l.host_store, l.representative) == ("srun", 1, 3, "gpu01", False, True)
    assert not cl_launch.detect_launch({**srun, "SLURM_LOCALID": "3"}, store_port=29401).representative
    tr = {"TORCHELASTIC_RUN_ID": "r1", "GROUP_RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1",
          "MASTER_ADDR": "node1", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    l = cl_launch.detect_launch(tr, store_port=1, hostname="node1")
    assert (l.mode, l.index, l.world, l.store_host, l.store_port, l.host_store) == ("torchrun", 0, 2, "node1", 29500, False)
    with pytest.raises(BadInput, match="srun -N"):
        cl_launch.detect_launch({}, store_port=29401)
    with pytest.raises(BadInput, match="this is the job script"):  # sbatch's script: no step on every node
        cl_launch.detect_launch({"SLURM_JOB_NODELIST": "gpu[01-03]", "SLURM_PROCID": "0"}, store_port=29401)


def test_hostlists_expand_and_collect_with_slurms_grammar():
    assert hostlist.expand("gpu[01-04,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"]
    assert hostlist.collect(["node1", "node2", "node3", "node10"]) == "node[1-3,10]"
    assert hostlist.first("a[1-2]-b[3-4]") == "a1-b3"
    with pytest.raises(BadInput, match="bad Slurm hostlist"):
        hostlist.expand("node[3-1]")
