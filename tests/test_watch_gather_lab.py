"""`srun --overlap ... ddpdoctor watch --gather` beside a REAL Gloo training job in the Slurm lab.

Each lab node's slurmd runs in a pid namespace of its own (SlurmLab(pid_ns=True)), so a node's watch
sees only its own ranks, as on separate machines; the views meet on the first node, which prints one
verdict for the job. The job is `srun python train.py` (RANK from SLURM_PROCID), one rank per node.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from slurmlab import DD, REPO_ROOT, start_or_skip
from watchlab import JOB, line_of

pytest.importorskip("torch")
WRAP = ('export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS LOCAL_WORLD_SIZE=1 '
        'MASTER_ADDR=node1 MASTER_PORT=29511 OMP_NUM_THREADS=1; exec "$0" "$@"')


@pytest.fixture
def slurm(make_lab):
    lab = make_lab(("head", "node1", "node2"))
    s = start_or_skip(lab, pid_ns=True, cpus=2)
    yield s
    s.close()


# `srun -N2 torchrun ...`: each node's torchrun agent is the srun task and carries SLURM_PROCID; its worker
# (RANK) is the rank (probes/ranks.py). Issue 22: a watch that took the agent for the rank judged torchrun's code.
TORCHRUN = ('export OMP_NUM_THREADS=1; exec "$0" -m torch.distributed.run --nnodes=2 --nproc-per-node=1 '
            '--node-rank=$SLURM_NODEID --master-addr=node1 --master-port=29512 "$@"')


@pytest.mark.parametrize("launch", ["srun python", "srun torchrun"])
def test_gather_names_the_sleeping_rank_and_its_node_once(slurm, tmp_path: Path, launch):
    fault = tmp_path / "fault"
    log = tmp_path / "job.log"
    env = {**slurm.env, "PYTHONPATH": str(REPO_ROOT), "FAULT_FILE": str(fault), "TRAIN_SECONDS": "150"}
    wrap = WRAP if launch == "srun python" else TORCHRUN
    with open(log, "w") as f:
        p = slurm.lab.popen("head", ["srun", "-J", "watched", "-N", "2", "--ntasks-per-node", "1",
                                     "sh", "-c", wrap, DD[0], str(JOB)], env=env, stdout=f, stderr=subprocess.STDOUT)
    w = None
    try:
        end = time.monotonic() + 120
        while log.read_text().count("ready ") < 2:
            assert p.poll() is None and time.monotonic() < end, log.read_text()[-3000:]
            time.sleep(0.5)
        jobid = slurm.run(["squeue", "-h", "-o", "%i", "-n", "watched"], timeout=15).stdout.split()[0]
        w = slurm.lab.popen("head", ["srun", "--jobid", jobid, "--overlap", "-N", "2", "--ntasks-per-node", "1",
                                     *DD, "watch", "--gather", "--json", "--deadline", "60"],
                            env={**slurm.env, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
        time.sleep(15)  # healthy: nothing but the start
        tmp = fault.with_suffix(".tmp")
        tmp.write_text("sleep:1")
        tmp.replace(fault)
        t = time.monotonic()
        out, err = w.communicate(timeout=120)
        events = [json.loads(ln) for ln in out.splitlines()]
        hang = [e for e in events if e["kind"] == "hang"]
        assert len(hang) == 1, (events, err)  # one verdict for the job, printed by the first node only
        (e,) = hang
        assert e["ranks"] == [1] and e["hosts"] == ["node2"] and "user code" in e["detail"], e
        assert "torch/distributed/run.py" not in json.dumps(e), e  # the worker, not torchrun's agent
        assert e["where"][0]["where"]["line"] == line_of("LINE_SLEEP")
        assert e["waiting"] == {"ranks": [0], "call": "all_reduce", "at": f"train.py:{line_of('LINE_ALLREDUCE')}"}
        assert [x["kind"] for x in events] == ["hang", "summary"], events  # nothing while healthy
        assert events[-1]["hosts"] == ["node1", "node2"] and w.returncode == 1, err
        assert p.poll() is None, "watch must leave the job running"
        assert time.monotonic() - t < 80
    finally:
        if w is not None and w.poll() is None:
            slurm.lab.kill(w)
        slurm.lab.kill(p)


@pytest.fixture
def slurm3(make_lab):
    lab = make_lab(("head", "node1", "node2", "node3"))
    s = start_or_skip(lab, pid_ns=True, cpus=2)
    yield s
    s.close()


def test_gather_names_the_node_whose_incoming_packets_are_dropped(slurm3, tmp_path: Path):
    slurm = slurm3
    log = tmp_path / "job.log"
    env = {**slurm.env, "PYTHONPATH": str(REPO_ROOT), "FAULT_FILE": str(tmp_path / "none"), "TRAIN_SECONDS": "300"}
    with open(log, "w") as f:
        p = slurm.lab.popen("head", ["srun", "-J", "dropped", "-N", "3", "--ntasks-per-node", "1",
                                     "sh", "-c", WRAP, DD[0], str(JOB)], env=env, stdout=f, stderr=subprocess.STDOUT)
    w = None
    try:
        end = time.monotonic() + 150
        while log.read_text().count("ready ") < 3:
            assert p.poll() is None and time.monotonic() < end, log.read_text()[-3000:]
            time.sleep(0.5)
        jobid = slurm.run(["squeue", "-h", "-o", "%i", "-n", "dropped"], timeout=15).stdout.split()[0]
        w = slurm.lab.popen("head", ["srun", "--jobid", jobid, "--overlap", "-N", "3", "--ntasks-per-node", "1",
                                     *DD, "watch", "--gather", "--json", "--deadline", "50"],
                            env={**slurm.env, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
        time.sleep(12)
        # node3 drops every packet it receives, except watch's own gather connection to node1
        for rule in (["-p", "tcp", "--sport", "29404", "-j", "ACCEPT"], ["-p", "tcp", "--dport", "29404", "-j", "ACCEPT"],
                     ["-j", "DROP"]):
            slurm.lab.iptables("node3", "-A", "INPUT", *rule)
        # srun itself cannot end while node3 drops Slurm's messages too: read events as they come
        events = []
        end = time.monotonic() + 120
        while time.monotonic() < end and not any(e["kind"] == "summary" for e in events):
            ln = w.stdout.readline()
            if not ln:
                break
            events.append(json.loads(ln))
        (e,) = [e for e in events if e["kind"] == "hang"]
        assert "packets to or from node3 are dropped" in e["detail"], events
        assert e["waiting"]["ranks"] == [0, 1, 2] and e["waiting"]["call"] == "all_reduce"
    finally:
        if w is not None and w.poll() is None:
            slurm.lab.kill(w)
        slurm.lab.kill(p)
