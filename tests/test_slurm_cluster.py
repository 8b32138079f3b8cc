"""`srun -N N ddpdoctor cluster` in a real Slurm: it finds a port dropped between one pair of nodes,
names the pair, and names a node that cannot reach the store as missing, within the deadline."""
from __future__ import annotations

import json
import time

import pytest

from slurmlab import DD, start_or_skip

PORT, STORE_PORT = 29400, 29401


@pytest.fixture
def make_slurm(make_lab):
    made = []

    def factory(n):
        lab = make_lab(("head", *(f"node{i}" for i in range(1, n + 1))))
        s = start_or_skip(lab)
        made.append(s)
        return lab, s

    yield factory
    for s in reversed(made):
        s.close()


def cluster(slurm, n, *args, deadline=30, timeout=90):
    t0 = time.monotonic()
    r = slurm.srun("-N", str(n), "--ntasks-per-node=1", *DD, "cluster", "--json", "--out-dir", str(slurm.dir),
                   "--deadline", str(deadline), *args, timeout=timeout)
    took = time.monotonic() - t0
    report = json.loads(r.stdout)
    lists = {name: (slurm.dir / name).read_text().strip() for name in ("passing_nodes", "failing_nodes")}
    return r, report, lists, took


def result(report, check_id):
    (r,) = [r for r in report["results"] if r["id"] == check_id]
    return r


def failing(report):
    return {r["id"] for r in report["results"] if r["status"] in ("fail", "timeout", "crash")}


def drop(lab, node, src, port):
    lab.iptables(node, "-A", "INPUT", "-s", lab.addr(src), "-p", "tcp", "--dport", str(port), "-j", "DROP")


def test_two_nodes_pass_then_a_dropped_port_names_the_pair(make_slurm):
    lab, slurm = make_slurm(2)
    r, rep, lists, took = cluster(slurm, 2)
    assert r.returncode == 0 and rep["exit_code"] == 0, r.stderr
    assert failing(rep) == set()
    assert rep["cluster"]["matrix"] == [["-", "ok"], ["ok", "-"]]
    assert lists == {"passing_nodes": "node[1-2]", "failing_nodes": ""}

    drop(lab, "node2", "node1", PORT)  # node2's firewall drops node1's connections to the rendezvous port
    r, rep, lists, took = cluster(slurm, 2)
    assert r.returncode != 0 and failing(rep) == {"DD713"}
    (f,) = result(rep, "DD713")["findings"]
    assert f["message"] == f"node1 → node2: port {PORT}: no answer: a firewall silently drops the packets"
    assert rep["cluster"]["matrix"] == [["-", "R"], ["ok", "-"]]
    assert lists == {"passing_nodes": "node1", "failing_nodes": "node2"}
    assert took < 30  # the filtered probe costs its 2 s timeout, not a rendezvous timeout


def test_four_nodes_name_the_broken_pair_and_the_node_that_never_reports(make_slurm):
    lab, slurm = make_slurm(4)
    drop(lab, "node3", "node2", PORT)        # one pair: node2 -> node3 on the rendezvous port
    drop(lab, "node1", "node4", STORE_PORT)  # node4 cannot reach the store on the first node
    deadline = 16
    r, rep, lists, took = cluster(slurm, 4, deadline=deadline)
    assert "node4 could not take part: could not reach the store at node1:29401" in r.stderr
    assert failing(rep) == {"DD711", "DD713"}
    (m,) = result(rep, "DD711")["findings"]
    assert m["message"] == "node4 never reported, but its listener answered node[1-3]"
    (f,) = result(rep, "DD713")["findings"]
    assert f["message"] == f"node2 → node3: port {PORT}: no answer: a firewall silently drops the packets"
    assert rep["cluster"]["missing"] == ["node4"]
    assert rep["cluster"]["matrix"][1][2] == "R" and rep["cluster"]["matrix"][3] == ["?", "?", "?", "-"]
    assert lists == {"passing_nodes": "node[1-2]", "failing_nodes": "node[3-4]"}
    assert took < deadline + 12  # named within the deadline (plus start-up and teardown)


def test_pairing_strategy_names_the_bad_node_in_two_rounds(make_slurm):
    lab, slurm = make_slurm(6)
    for src in ("node1", "node2", "node4", "node5", "node6"):
        drop(lab, "node3", src, PORT)  # node3's firewall drops everyone on the rendezvous port
    page = slurm.dir / "matrix.html"
    r, rep, lists, took = cluster(slurm, 6, "--strategy", "pairs", "--html", str(page), deadline=24)
    assert "failing: node3" in page.read_text()  # the heatmap written by the first node
    pv = rep["cluster"]["pairing"]
    assert rep["cluster"]["strategy"] == "pairs"
    assert pv["bad"] == [2] and pv["rounds"] == 2 and pv["inconclusive"] == [], pv
    assert len(pv["round1"]) == 3 and len(pv["round2"]) == 2  # node3 and its round-1 partner, re-paired
    assert lists["failing_nodes"] == "node3"


def test_pair_allreduce_names_a_node_whose_own_hostname_points_gloo_at_a_decoy(make_slurm):
    """node3 resolves its own name to a decoy NIC nobody can reach (every other node resolves it
    right), so every probe *to* node3 passes; Gloo on node3 advertises the decoy and the job's
    first collective fails (the real torchrun job: tests/test_lab_network.py, decoy case). Only
    the pair's all-reduce sees it: node3 is the bad node of the pairing rounds."""
    from netlab import hostname_on_low_decoy
    lab, slurm = make_slurm(4)
    hostname_on_low_decoy(lab, "node3")
    r, rep, lists, took = cluster(slurm, 4, "--strategy", "pairs", deadline=30)
    pv = rep["cluster"]["pairing"]
    assert pv["bad"] == [2], pv
    failed = [t for t in pv["round1"] + pv["round2"] if not t[2]]
    assert failed and all(2 in t[:2] for t in failed), pv
    assert all(t[4].startswith("all-reduce:") for t in failed), failed  # the probes and transfer passed
    assert "node3" in lists["failing_nodes"]
