"""`cluster`'s whole output pinned: records as they arrive from the store (through JSON), the view,
the DD71x checks and the report's own section, compared with tests/golden/cluster_*.{json,txt}.
Written before the records became typed (issue 20), so the typed view must say exactly what the
dict view said."""
from __future__ import annotations

import pytest

import golden
from ddpdoctor import registry, runner
from ddpdoctor.facts.cluster import ClusterView
from ddpdoctor.model import Report

PORT = 29400


def addr(i):
    return f"10.0.0.{i + 1}"


def probe(j, *, rdzv="open", eph="open", resolved=None, resolve_error="", answered_by=None, timed_out=False):
    a = resolved if resolved is not None else addr(j)
    if resolve_error:
        return {"name": f"node{j + 1}", "addrs": [], "resolve_error": resolve_error, "resolve_ms": 2000.0 if timed_out else 1.2,
                "resolve_timed_out": timed_out, "addr": None}
    p = {"name": f"node{j + 1}", "addrs": [a], "resolve_error": "", "resolve_ms": 0.4, "resolve_timed_out": False,
         "addr": a, "rdzv": {"state": rdzv, "ms": 0.3, "error": "" if rdzv == "open" else "timed out"}}
    if rdzv == "open":
        p["rdzv"].update(ddpdoctor=True, answered_by=answered_by or f"node{j + 1}")
        if answered_by and answered_by != f"node{j + 1}":
            p["rdzv"]["state"] = "wrong-host"
    if eph is not None:
        p["eph"] = {"state": eph, "ms": 0.3, "error": "", "port": 40000 + j}
    return p


def record(i, n, overrides=None, *, versions=None, settings=None, env=None, local=None, mtu=1500, peers=None,
           port_error=""):
    overrides = overrides or {}
    peers = [j for j in range(n) if j != i] if peers is None else peers
    return {"index": i, "node": f"node{i + 1}", "hostname": f"node{i + 1}", "addrs": [addr(i)],
            "addr_mtu": {addr(i): mtu}, "port": PORT, "port_error": port_error, "eport": 40000 + i,
            "eport_range": [32768, 60999],
            "versions": versions or {"python": "3.11.7", "ddpdoctor": "0.1.0", "torch": "2.13.0", "cuda": "none",
                                     "nccl": "none", "driver": "550.54"},
            "settings": settings or {}, "env": env or {}, "peers": peers,
            "probes": {str(j): overrides.get(j, probe(j)) for j in peers}, "local": local or [],
            "timing": {"listen_s": 0.01, "store_s": 0.2, "probe_s": 0.05, "total_s": 1.0 + i / 10}}


def report_of(records, n, *, reference=None, names=()):
    """What cli/cluster.py makes of the gathered records, less what a real run alone has (files, html)."""
    view = ClusterView(golden.wire(records), n, names=names, port=PORT, store="node1:29401", elapsed_s=2.5,
                       reference=reference)
    results = runner.run_checks(registry.select("cluster"), view, deadline=10)
    pv = view.pairing
    extra = {"cluster": {
        "files_error": "", "html": None, "missing_label": view.label(view.missing),
        "pairing_labels": {k: view.label(getattr(pv, k)) for k in ("bad", "slow", "inconclusive")} if pv else None,
        "summary": view.summary(), "mode": "srun", "nodes": view.names, "port": PORT, "store": view.store,
        "missing": [view.names[i] for i in view.missing], "passing": view.label(view.passing()),
        "failing": view.label(view.failing()), "files": [], "max_peers": 16, "seed": 0,
        "fingerprint": view.majority_fingerprint(), "strategy": "pairs" if pv else "matrix", "pairing": pv.to_wire() if pv else None,
        "matrix": view.matrix(),
        "timing": {view.names[i]: view.timing(i) for i in sorted(view.records)},
        "incoming_first_node": view.incoming}}
    return Report("cluster", view.hostname, tuple(results), 2.5, extra=extra)


def _healthy(n=4):
    recs = {i: record(i, n) for i in range(n)}
    recs[0]["incoming"] = [[addr(j), f"node{j + 1}"] for j in range(1, n)]
    return recs, n


def _port_dropped():
    recs, n = _healthy()
    recs[1] = record(1, n, {2: probe(2, rdzv="filtered")})
    recs[3] = record(3, n, {2: probe(2, rdzv="refused", eph="refused")})
    return recs, n


def _node_nobody_reaches():
    n = 4
    recs = {i: record(i, n, {3: probe(3, rdzv="filtered", eph="filtered")}) for i in range(3)}
    recs[3] = record(3, n)
    return recs, n


def _ephemeral_dropped():
    n = 3
    return {0: record(0, n, {1: probe(1, eph="filtered")}), 1: record(1, n), 2: record(2, n, {1: probe(1, eph="unreachable")})}, n


def _missing_nodes():
    n = 5
    cut = {3: probe(3, eph=None), 4: probe(4, rdzv="unreachable", eph=None)}
    recs = {i: record(i, n, cut) for i in range(3)}
    recs[2] = {k: recs[2][k] for k in ("index", "node", "hostname", "addrs", "addr_mtu", "port", "port_error", "eport",
                                       "eport_range")}
    recs[2]["unfinished"] = True
    return recs, n


def _names():
    n = 4
    recs = {i: record(i, n) for i in range(n)}
    recs[0] = record(0, n, {2: probe(2, resolved="10.9.9.9")})
    recs[1] = record(1, n, {2: probe(2, resolve_error="Name or service not known"),
                            3: probe(3, resolve_error="timed out after 2.0 s", timed_out=True)})
    recs[3] = record(3, n, {1: probe(1, resolved=addr(0), answered_by="node1")})
    return recs, n


def _drift():
    n = 4
    base = {"python": "3.11.7", "ddpdoctor": "0.1.0", "torch": "2.13.0", "cuda": "12.4", "nccl": "2.21.5", "driver": "550.54"}
    recs = {i: record(i, n, versions=dict(base), settings={"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": f"=eth{i}"},
                      env={"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}) for i in range(n)}
    recs[2]["versions"].update(torch="2.12.0", driver="535.1")
    recs[3]["settings"] = {"NCCL_SOCKET_IFNAME": "=eth3", "NCCL_PROTO": "Simple (nccl.conf)"}
    recs[3]["env"] = {"LD_LIBRARY_PATH": "/opt/nccl/lib:/usr/local/cuda/lib64"}
    return recs, n


def _local_failures():
    n = 3
    bad = [{"id": "DD601", "title": "/dev/shm", "category": "system", "status": "fail", "duration_s": 0.0, "findings": [
        {"severity": "error", "message": "/dev/shm is 64 MiB, below the site minimum of 1 GiB", "hint": "docker default",
         "fix": {"summary": "remount", "commands": ["mount -o remount,size=1024M /dev/shm"], "env": {}}, "evidence": {}},
        {"severity": "warning", "message": "a warning that does not fail the node", "hint": "", "fix": None,
         "evidence": {}}]},
        {"id": "DD301", "title": "ifname", "category": "nic", "status": "fail", "duration_s": 0.0, "findings": [
            {"severity": "error", "message": "NCCL_SOCKET_IFNAME='eht0' selects no interface that is up", "hint": "",
             "fix": None, "evidence": {}}]},
        {"id": "DD603", "title": "ok", "category": "system", "status": "pass", "duration_s": 0.0, "findings": []}]
    return {0: record(0, n), 1: record(1, n, local=bad), 2: record(2, n)}, n


def _large():
    n = 70
    recs = {}
    for i in range(n):
        ring = [(i + 1) % n, (i - 1) % n] + ([0] if i else [])
        recs[i] = record(i, n, peers=sorted(set(ring)))
    recs[5]["probes"]["6"] = probe(6, rdzv="refused")
    recs[9]["probes"]["10"] = probe(10, rdzv="filtered", eph="filtered")
    recs[11]["probes"]["10"] = probe(10, rdzv="filtered", eph="filtered")
    del recs[40]
    return recs, n


def _pairing():
    n = 6
    recs = {i: record(i, n, peers=[i ^ 1]) for i in range(n)}
    for i in range(n):
        j = i ^ 1
        recs[i]["pairs1"] = {str(j): {"ok": True, "seconds": 0.01, "cell": "ok",
                                      "bulk": {"sent_ok": True, "back_ok": True, "error": "", "complete": True},
                                      "allreduce": {"ok": True, "seconds": 0.02, "error": ""}}}
    recs[4]["probes"]["5"] = probe(5, rdzv="filtered", eph="filtered")
    recs[4]["pairs1"]["5"] = {"ok": False, "seconds": 0.0, "cell": "X"}
    recs[4]["probes2"] = {"0": probe(0)}
    recs[5]["probes2"] = {"1": probe(1, rdzv="filtered")}
    recs[0]["pairing"] = {"round1": [[0, 1, True, 0.03, ""], [2, 3, True, 0.03, ""], [4, 5, False, 0.0, "X/ok"]],
                          "round2": [[4, 0, True, 0.03, ""], [5, 1, False, 0.0, "R/ok"]],
                          "bad": [5], "slow": [], "cleared": [4], "inconclusive": [], "rounds": 2, "tests": 5}
    for i in range(n):  # round-2 cells join the matrix, as pairing_rounds merges them
        for k, p in (recs[i].get("probes2") or {}).items():
            recs[i]["probes"].setdefault(k, p)
    return recs, n


def _mtu_and_ports():
    n = 4
    recs = {i: record(i, n, mtu=9000) for i in range(n)}
    recs[2] = record(2, n, mtu=1500)
    recs[0]["port_error"] = "in use by another program"
    recs[3]["port_error"] = "in use by another program"
    recs[1]["addr_mtu"] = {addr(1): 9000, "192.168.5.2": 1500}
    return recs, n


SCENARIOS = {
    "healthy": _healthy, "port_dropped": _port_dropped, "node_nobody_reaches": _node_nobody_reaches,
    "ephemeral_dropped": _ephemeral_dropped, "missing_nodes": _missing_nodes, "names": _names, "drift": _drift,
    "local_failures": _local_failures, "large": _large, "pairing": _pairing, "mtu_and_ports": _mtu_and_ports,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_cluster_output_matches_its_golden(name):
    recs, n = SCENARIOS[name]()
    golden.check(f"cluster_{name}", report_of(recs, n))


def test_a_reference_fingerprint_is_judged_against_the_file_not_the_majority():
    recs, n = _drift()
    golden.check("cluster_reference", report_of(recs, n, reference={"torch": "2.12.0", "NCCL_IB_DISABLE": "1"}))


def test_names_from_the_launcher_stand_for_nodes_that_never_said_hello():
    recs, _ = _healthy(3)
    recs = {i: record(i, 4, peers=[j for j in range(4) if j != i]) for i in range(3)}
    golden.check("cluster_launcher_names", report_of(recs, 4, names=["gpu01", "gpu02", "gpu03", "gpu04"]))
