"""`ddpdoctor prolog` as Slurm's Prolog= in a real Slurm (tests/slurmlab.py): faults drain, crashes do not."""
from __future__ import annotations

import json
import os

import pytest

from slurmlab import DD, start_or_skip


@pytest.fixture
def make_slurm(make_lab):
    made = []

    def factory(computes=("node1", "node2"), **kw):
        lab = make_lab(("head", *computes))
        s = start_or_skip(lab, **kw)
        made.append(s)
        return lab, s

    yield factory
    for s in reversed(made):
        s.close()


def reports(slurm, job_id=None):
    out = {}
    for p in slurm.dir.glob("report-*.json"):
        node, job = p.stem.split("-")[1:3]
        if job_id is None or job == str(job_id):
            out[node] = json.loads(p.read_text())
    return out


def prolog_argv(slurm, *extra):
    return [*DD, "prolog", "--report-file", str(slurm.dir / "report-%n-%j.json"), *extra]


def test_faulty_nodes_are_drained_with_a_ddpdoctor_reason_and_the_healthy_one_is_not(make_slurm):
    lab, slurm = make_slurm(("node1", "node2", "node3"))
    slurm.set_prolog(prolog_argv(slurm, "--drain"))
    # node2: its own name resolves to an address that is not its own (a stale /etc/hosts line)
    stray = lab.decoy_cidr(7).split("/")[0]
    lab.set_hosts("node2", {**{n: lab.addr(n) for n in lab.names}, "node2": stray})
    # node3: a container-sized /dev/shm in its mount namespace
    lab.mount_tmpfs("node3", "/dev/shm", "64M")

    r = slurm.srun("-N", "3", "hostname", timeout=60)
    assert r.returncode != 0 and "prolog" in r.stderr.lower(), r.stderr

    slurm.wait_idle(["node1"])  # the healthy node finishes the aborted job and stays in service
    states = slurm.nodes()
    assert states["node1"] == ("idle", "")
    assert states["node2"][0].startswith("drain")
    assert states["node2"][1].startswith(f"ddpdoctor: DD203 'node2' resolves to {stray}, none of which")
    assert states["node3"][0].startswith("drain")
    assert states["node3"][1] == "ddpdoctor: DD601 /dev/shm is 64 MiB, below the site minimum of 1 GiB"

    rep = reports(slurm)
    assert rep["node1"]["prolog"]["exit_code"] == 0 and rep["node1"]["prolog"]["faults"] == []
    assert rep["node3"]["prolog"]["drained"] and rep["node3"]["prolog"]["exit_code"] == 1
    assert rep["node1"]["prolog"]["first_node"] == "node1" and rep["node1"]["prolog"]["job_nodes"] == ["node1", "node2", "node3"]
    assert all(r["prolog"]["process_age_s"] < 5 for r in rep.values())

    # the node left in service runs jobs; the prolog passes there again
    ok = slurm.srun("-N", "1", "-w", "node1", "hostname", timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == "node1", ok.stderr


def test_a_ddpdoctor_crash_does_not_drain_unless_strict(make_slurm):
    lab, slurm = make_slurm(("node1", "node2"))
    # DDPDOCTOR_TEST_CRASH=prolog makes the prolog raise, standing in for a bug in ddpdoctor
    slurm.set_prolog(prolog_argv(slurm), env={"DDPDOCTOR_TEST_CRASH": "prolog"})
    r = slurm.srun("-N", "2", "hostname", timeout=60)
    assert r.returncode == 0 and sorted(r.stdout.split()) == ["node1", "node2"], r.stderr
    assert slurm.nodes() == {"node1": ("idle", ""), "node2": ("idle", "")}
    rep = reports(slurm)
    assert set(rep) == {"node1", "node2"}
    assert all("crash requested by DDPDOCTOR_TEST_CRASH" in v["prolog"]["crash"] for v in rep.values())

    # --strict: the admin asked for a crash to fail the node; Slurm drains it with its own reason
    slurm.set_prolog(prolog_argv(slurm, "--strict"), env={"DDPDOCTOR_TEST_CRASH": "prolog"})
    r = slurm.srun("-N", "1", "-w", "node2", "hostname", timeout=60)
    assert r.returncode != 0
    assert slurm.wait_state("node2", "drained") == ("drained", "Prolog error")


def test_a_gpu_still_busy_from_an_earlier_job_drains_the_node_until_the_process_is_gone(make_slurm):
    # Slurm hands out gres GPUs and names them in the Prolog's SLURM_JOB_GPUS; NVML is the fake
    # (tests/fakes/pynvml.py), which puts a real leftover process of node2 on node2's GPU 0.
    lab, slurm = make_slurm(("node1", "node2"), gpus=2)
    leftover = lab.popen("node2", ["sleep", "600"], env={"LEFTOVER_OF_JOB": "41"})
    for node, procs in (("node1", []), ("node2", [{"pid": {"env": {"LEFTOVER_OF_JOB": "41"}}, "used_mib": 12288}])):
        state = {"driver": "550.54.15", "gpus": [{"uuid": f"GPU-{node}-0", "base_mib": 300, "procs": procs},
                                                 {"uuid": f"GPU-{node}-1", "base_mib": 300, "procs": []}]}
        (slurm.dir / f"nvml-{node}.json").write_text(json.dumps(state))
    fakes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes")
    argv = " ".join(prolog_argv(slurm, "--drain"))
    slurm.prolog_path.write_text(f"#!/bin/sh\nexport PYTHONPATH={fakes}\n"
                                 f"export FAKE_PYNVML_STATE={slurm.dir}/nvml-$SLURMD_NODENAME.json\nexec {argv}\n")

    r = slurm.srun("-N", "2", "--gres=gpu:1", "printenv", "CUDA_VISIBLE_DEVICES", timeout=60)
    assert r.returncode != 0
    slurm.wait_idle(["node1"])
    state, reason = slurm.nodes()["node2"]
    assert state.startswith("drain")
    assert reason == f"ddpdoctor: DD702 GPU 0 already runs 1 process(es) before the job starts: pid {leftover.pid} sleep (12 GiB)"
    rep = reports(slurm)
    assert [r["status"] for r in rep["node1"]["results"] if r["id"] in ("DD701", "DD702")] == ["pass", "pass"]

    # the fix the finding gives, then the node goes back into service and the job runs
    lab.kill(leftover)
    slurm.resume("node2")
    r = slurm.srun("-N", "2", "--gres=gpu:1", "printenv", "CUDA_VISIBLE_DEVICES", timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["0", "0"], r.stderr
