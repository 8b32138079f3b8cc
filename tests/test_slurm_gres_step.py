"""SLURM_GRES_INHERITED_FROM_ALLOCATION in a real Slurm (tests/slurmlab.py, 2 gres GPUs per node): a step inside
an allocation made with --gpus-per-task inherits SLURM_GPUS_PER_TASK, its own --gres is then refused with
`Invalid generic resource (gres) specification`, `explain` names the mode, and the fix the mode prints (unset the
inherited GPU variables) lets the same srun start."""
from __future__ import annotations

import io

import pytest

from ddpdoctor import catalog
from ddpdoctor.logscan import explain_stream
from slurmlab import start_or_skip

MODE = "SLURM_GRES_INHERITED_FROM_ALLOCATION"


@pytest.fixture
def slurm(make_lab):
    lab = make_lab(("head", "node1", "node2"))
    s = start_or_skip(lab, gpus=2)
    yield s
    s.close()


def _diagnoses(text: str):
    return explain_stream(io.BytesIO(text.encode())).diagnoses


def test_inherited_gpus_per_task_refuses_the_steps_gres_and_the_printed_unset_fixes_it(slurm):
    step = "srun -n1 --gres=gpu:1 hostname"
    r = slurm.run(["salloc", "-N1", "-n1", "--gpus-per-task=1", "bash", "-c",
                   "echo SLURM_GPUS_PER_TASK=$SLURM_GPUS_PER_TASK; " + step.replace("gpu:1", "gpu:2")], timeout=60)
    assert r.returncode != 0
    assert "SLURM_GPUS_PER_TASK=1" in r.stdout
    assert "Invalid generic resource (gres) specification" in r.stderr
    diags = _diagnoses(r.stderr)
    assert diags and diags[0].failure.id == MODE

    unset = next(c for c in catalog.get(MODE).fix.commands if c.startswith("unset "))
    r = slurm.run(["salloc", "-N1", "-n1", "--gpus-per-task=1", "bash", "-c", f"{unset}; {step}"], timeout=60)
    assert r.returncode == 0, r.stderr
    assert "node1" in r.stdout


def test_a_nested_step_asking_more_gpus_than_the_job_is_named_with_both_counts(slurm):
    r = slurm.run(["srun", "-N1", "-n1", "--gres=gpu:2", "bash", "-c", "srun -n1 --gres=gpu:3 hostname"], timeout=60)
    assert r.returncode != 0
    d = _diagnoses(r.stderr)[0]
    assert d.failure.id == MODE and d.confidence >= 0.5     # the step's own count against the job's decides
    assert any("gres_per_node=gpu:3" in (e.note or "") for e in d.evidence)
