"""`watch` finds its ranks through probes/ranks.py and picks its job with inspect's pick_job: the same
answer as `inspect` on the same /proc (the launcher trees of tests/test_ranks.py); only the words for
"--pid is not a job" are watch's own (tests/test_watch_cli.py runs them on a real process)."""
from __future__ import annotations

import pytest

from ddpdoctor.inspect import sample
from ddpdoctor.probes import ranks as probe
from ddpdoctor.watch import ranks as watchranks
from test_ranks import PY, P, tree, worker

SLURM = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2"}


def srun_torchrun_and_a_bigger_job():
    """srun -> torchrun (agent carries SLURM_PROCID, 2 workers) beside a 3-rank torchrun job of someone else."""
    other = {**worker(0, run="none"), "MASTER_PORT": "29600"}
    return tree(P(5, 1, ["slurmstepd: [77.0]"], {}, exe="/usr/sbin/slurmstepd"),
                P(10, 5, [PY, "/usr/local/bin/torchrun", "--nnodes=2", "t.py"], SLURM),
                P(11, 10, [PY, "t.py"], {**SLURM, **worker(2, run="none")}),
                P(12, 10, [PY, "t.py"], {**SLURM, **worker(3, run="none")}),
                P(20, 1, [PY, "/usr/bin/torchrun", "b.py"], {}),
                *(P(21 + i, 20, [PY, "b.py"], {**other, "RANK": str(i)}) for i in range(3)))


@pytest.fixture
def proc(monkeypatch):
    procs = {}
    monkeypatch.setattr(probe, "discover", lambda exclude=(), root="/proc": probe.identify(procs, exclude))
    return procs


def test_under_srun_torchrun_watch_watches_the_workers_of_its_allocation_as_inspect_does(proc, monkeypatch):
    proc.update(srun_torchrun_and_a_bigger_job())
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    key, found, others = watchranks.find()
    assert key == "slurm:77.0" and [(r.rank, r.pid, r.launcher) for r in found] == [(2, 11, "torchrun"), (3, 12, "torchrun")]
    assert others == ["master:node1:29600"]  # the other job is named, never dropped silently
    job, _ = sample.pick_job(probe.identify(proc), None)
    assert job.key == key and [r.pid for r in job.ranks] == [r.pid for r in found]


def test_outside_an_allocation_watch_takes_the_largest_job_and_names_the_other(proc, monkeypatch):
    proc.update(srun_torchrun_and_a_bigger_job())
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    key, found, others = watchranks.find()
    assert key == "master:node1:29600" and len(found) == 3 and others == ["slurm:77.0"]


def test_pid_of_the_agent_or_of_a_rank_picks_that_job(proc, monkeypatch):
    proc.update(srun_torchrun_and_a_bigger_job())
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert watchranks.find(10)[0] == "slurm:77.0"   # the torchrun agent above the ranks
    assert watchranks.find(22)[0] == "master:node1:29600"


def test_a_pid_that_is_no_job_keeps_watchs_wording(proc, monkeypatch):
    import os
    proc.update(srun_torchrun_and_a_bigger_job())
    me = os.getpid()  # readable, and not in the fake tree: pick_job reads its real environment
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(watchranks.NoJob, match="not a process of a running torch.distributed job"):
        watchranks.find(me)


def test_an_agent_between_generations_is_no_job_yet_with_the_reason(proc):
    proc.update(tree(P(10, 1, [PY, "/usr/bin/torchrun", "t.py"], {})))
    with pytest.raises(watchranks.NoJob, match="no live worker"):
        watchranks.find()
