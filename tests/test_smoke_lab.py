"""`ddpdoctor smoke` under a real 2-node torchrun in the network-namespace lab (tests/lab.py).

node1 and node2 are separate hosts as far as torch can tell (own hostname, own eth0 address,
own /etc/hosts): the rendezvous, the store and Gloo's pairs go over the lab's bridge.
"""
import json

import pytest

from lab import run_torchrun_job

pytestmark = pytest.mark.lab


def _reports(job) -> dict[str, dict]:
    """node -> the JSON report it printed (torchrun's own log lines share the output)."""
    out = {}
    for node, text in job.output.items():
        i = text.find('{\n  "schema"')
        if i >= 0:
            out[node] = json.JSONDecoder().raw_decode(text[i:])[0]
    return out


def _smoke(lab, *args, rdzv="static", env_per_node=None, wall=120):
    return run_torchrun_job(lab, rdzv=rdzv, extra_args=["-m"], script="ddpdoctor",
                            script_args=["smoke", "--json", *args], env_per_node=env_per_node,
                            wall_timeout=wall)


def test_two_node_torchrun_smoke_reports_both_hosts_from_rank_0(lab):
    # c10d rendezvous: torchrun's agent hosts the store and assigns the ranks
    job = _smoke(lab, "--max-size", "1M", "--timeout", "20", rdzv="c10d")
    assert not job.timed_out and job.rc == {"node1": 0, "node2": 0}, job.summary()
    reports = _reports(job)
    assert len(reports) == 1, "only rank 0 prints the report"
    (node, report), = reports.items()
    assert report["launcher"] == "torchrun" and report["world_size"] == 2
    hosts = {r["rank"]: r["host"] for r in report["ranks"]}
    assert hosts[0] == node and set(hosts.values()) == {"node1", "node2"}
    assert {r["id"]: r["status"] for r in report["results"]}["DD502"] == "pass"
    assert [row["size"] for row in report["bandwidth"]] == [64 << 10, 1 << 20]


def test_a_stopped_rank_on_the_other_node_is_named_with_its_host(lab):
    job = _smoke(lab, "--quick", "--timeout", "5",
                 env_per_node={"node2": {"DDPDOCTOR_SMOKE_FAULT": "stop:phase=all_reduce int64"}})
    assert not job.timed_out, job.summary()
    assert job.rc["node1"] == 1 and job.rc["node2"] != 0
    report = _reports(job)["node1"]
    (st,) = [s for s in report["verdict"]["states"] if s["rank"] == 1]
    assert st["host"] == "node2" and st["phase"] == "all_reduce int64 4 KiB"
    (msg, *_) = [f["message"] for r in report["results"] if r["id"] == "DD501" for f in r["findings"]]
    assert msg.startswith(f"rank 1 (pid {st['pid']}, node2) stopped responding in phase 'all_reduce int64 4 KiB'")
    assert job.node_elapsed_s["node2"] < 60, "the stopped rank's own supervisor ends it too"
