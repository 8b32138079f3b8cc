"""`ddpdoctor prolog --task` as Slurm's TaskProlog= arms every task the way `ddpdoctor arm` does
(a real Slurm in the lab): the flight-recorder variables reach the task, a value the user set wins,
the per-job dump directory exists (0700), and `[task] arm = false` turns it off."""
from __future__ import annotations

import os
import stat

import pytest

from slurmlab import DD, start_or_skip


@pytest.fixture
def slurm(make_lab):
    lab = make_lab(("head", "node1"))
    s = start_or_skip(lab)
    yield s
    s.close()


VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE")


def task_env(slurm, **env):
    """The listed variables as the task sees them ('-' when unset), and the task's job id."""
    script = "; ".join(f'echo "{v}=${{{v}:--}}"' for v in VARS) + '; echo "JOB=$SLURM_JOB_ID"'
    r = slurm.srun("-N", "1", "sh", "-c", script, env=env)
    assert r.returncode == 0, r.stderr
    pairs = [line.split("=", 1) for line in r.stdout.splitlines() if line.split("=", 1)[0] in (*VARS, "JOB")]
    return dict(pairs), r.stdout


def test_the_task_prolog_exports_the_arm_variables_and_never_overrides_the_user(slurm, tmp_path):
    root = tmp_path / "fr"
    conf = tmp_path / "ddpdoctor.toml"
    conf.write_text(f'[task]\nfr_entries = 500\nfr_dir = "{root}"\npg_timeout = 10\n')
    slurm.set_task_prolog([*DD, "prolog", "--task"], env={"DDPDOCTOR_CONFIG": str(conf)})

    got, out = task_env(slurm)
    job = got["JOB"]
    assert got == {"TORCH_FR_BUFFER_SIZE": "500", "TORCH_NCCL_TRACE_BUFFER_SIZE": "500", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                   "TORCH_FR_DUMP_TEMP_FILE": f"{root}/{job}/fr_rank_", "JOB": job}
    assert stat.S_IMODE(os.stat(root / job).st_mode) == 0o700
    # TaskProlog `print` lines land in the task's output: the site's timeout advice
    assert "ddpdoctor: the site asks for a process-group timeout of 10 min" in out

    # the user's own value wins, for both names of the setting
    got, _ = task_env(slurm, TORCH_NCCL_TRACE_BUFFER_SIZE="7", TORCH_NCCL_DUMP_ON_TIMEOUT="0")
    assert (got["TORCH_FR_BUFFER_SIZE"], got["TORCH_NCCL_TRACE_BUFFER_SIZE"], got["TORCH_NCCL_DUMP_ON_TIMEOUT"]) == ("-", "7", "0")

    conf.write_text("[task]\narm = false\n")
    got, _ = task_env(slurm)
    assert [got[v] for v in VARS] == ["-"] * len(VARS)
