"""`srun --overlap ... ddpdoctor watch --gather` beside a REAL Gloo training job in the Slurm lab.

Each lab node's slurmd runs in a pid namespace of its own (SlurmLab(pid_ns=True)), so a node's watch
sees only its own ranks, as on separate machines; the views meet on the first node, which prints one
verdict for the job. The job is `srun python train.py` (RANK from SLURM_PROCID), one rank per node, or
`srun -N2 torchrun ...` (the rank is torchrun's worker, never the agent that carries SLURM_PROCID).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurmlab import start_or_skip
from watchlab import SlurmJob, line_of, srun_python, srun_torchrun

pytest.importorskip("torch")


@pytest.fixture
def slurm(make_lab):
    lab = make_lab(("head", "node1", "node2"))
    s = start_or_skip(lab, pid_ns=True, cpus=2)
    yield s
    s.close()


# Issue 22: a watch that took torchrun's agent (it carries SLURM_PROCID) for the rank judged torchrun's code.
@pytest.mark.parametrize("launch", ["srun python", "srun torchrun"])
def test_gather_names_the_sleeping_rank_and_its_node_once(slurm, tmp_path: Path, launch):
    wrap = srun_python(29511) if launch == "srun python" else srun_torchrun(29512, 2)
    job = SlurmJob(slurm, tmp_path, "watched", 2, wrap, seconds=150)
    try:
        job.start_watch(job.wait_ready(), 60)
        time.sleep(15)  # healthy: nothing but the start
        t = job.fault("sleep:1")
        rc = job.finish(120)
        events = [{k: v for k, v in e.items() if k != "at"} for e in job.events]
        hang = [e for e in events if e["kind"] == "hang"]
        assert len(hang) == 1, (events, job.stderr())  # one verdict for the job, printed by the first node only
        (e,) = hang
        assert e["ranks"] == [1] and e["hosts"] == ["node2"] and "user code" in e["detail"], e
        assert "torch/distributed/run.py" not in json.dumps(e), e  # the worker, not torchrun's agent
        assert e["where"][0]["where"]["line"] == line_of("LINE_SLEEP")
        assert e["waiting"] == {"ranks": [0], "call": "all_reduce", "at": f"train.py:{line_of('LINE_ALLREDUCE')}"}
        assert [x["kind"] for x in events] == ["hang", "summary"], events  # nothing while healthy
        assert events[-1]["hosts"] == ["node1", "node2"] and rc == 1, job.stderr()
        assert job.proc.poll() is None, "watch must leave the job running"
        assert time.monotonic() - t < 80
    finally:
        job.close()


@pytest.fixture
def slurm3(make_lab):
    lab = make_lab(("head", "node1", "node2", "node3"))
    s = start_or_skip(lab, pid_ns=True, cpus=2)
    yield s
    s.close()


def test_gather_names_the_node_whose_incoming_packets_are_dropped(slurm3, tmp_path: Path):
    slurm = slurm3
    job = SlurmJob(slurm, tmp_path, "dropped", 3, srun_python(29511), seconds=300)
    try:
        job.start_watch(job.wait_ready(150), 50)
        time.sleep(12)
        # node3 drops every packet it receives, except watch's own gather connection to node1
        for rule in (["-p", "tcp", "--sport", "29404", "-j", "ACCEPT"], ["-p", "tcp", "--dport", "29404", "-j", "ACCEPT"],
                     ["-j", "DROP"]):
            slurm.lab.iptables("node3", "-A", "INPUT", *rule)
        # srun itself cannot end while node3 drops Slurm's messages too: read events as they come
        e = job.wait_for("hang", 120)
        assert e is not None and "packets to or from node3 are dropped" in e["detail"], job.events
        assert e["waiting"]["ranks"] == [0, 1, 2] and e["waiting"]["call"] == "all_reduce"
        job.wait_for("summary", 60)  # its --deadline ends it; one verdict for the job until then
        assert len([x for x in job.events if x["kind"] == "hang"]) == 1, job.events
    finally:
        job.close()
