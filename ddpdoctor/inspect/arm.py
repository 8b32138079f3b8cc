"""What `ddpdoctor arm` and `ddpdoctor prolog --task` export so that a job's next hang is cheap to diagnose.

Only facts about torch's own switches (read in torch 2.13's c10d: ProcessGroupNCCL / FlightRecorder):
- TORCH_FR_BUFFER_SIZE (new name) and TORCH_NCCL_TRACE_BUFFER_SIZE (the name torch < 2.7 reads):
  the flight recorder keeps the last N collectives per process group; 0 turns it off. 2000 entries
  cost a ring buffer of a few hundred KiB per group and one record per collective.
- TORCH_NCCL_DUMP_ON_TIMEOUT=1: when the watchdog sees a collective time out, every rank dumps its
  flight recorder.
- TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE: the dump's path prefix; torch appends
  the rank. We point it into a per-job directory we create (0700) so dumps of two jobs never mix.
No environment variable sets the default process-group timeout (torch/distributed/constants.py:
only `init_process_group(timeout=...)` does), so a site timeout is printed as advice, not exported.
A variable the user already set (even empty) is never overridden.
"""
from __future__ import annotations

import os
import re
from typing import Mapping

from ddpdoctor.render.safe import export_line, note_line, one_line

DEFAULT_ENTRIES = 2000


def job_id(env: Mapping[str, str]) -> str:
    return env.get("SLURM_JOB_ID") or env.get("TORCHELASTIC_RUN_ID") or f"pid{os.getppid()}"


def dump_dir(env: Mapping[str, str], root: str | None = None) -> str:
    root = root or env.get("DDPDOCTOR_FR_ROOT") or os.path.join(env.get("TMPDIR") or "/tmp", f"ddpdoctor-fr-{os.getuid()}")
    return os.path.join(root, re.sub(r"[^A-Za-z0-9_.-]", "_", job_id(env)))


def arm_vars(env: Mapping[str, str], *, directory: str, entries: int = DEFAULT_ENTRIES) -> dict[str, str]:
    prefix = os.path.join(directory, "fr_rank_")
    want = {"TORCH_FR_BUFFER_SIZE": str(entries), "TORCH_NCCL_TRACE_BUFFER_SIZE": str(entries),
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_DUMP_TEMP_FILE": prefix,
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}
    # each pair names one setting (new and old name): if the user set either, leave both alone
    for pair in (("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
                 ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")):
        if any(k in env for k in pair):
            for k in pair:
                want.pop(k)
    return {k: v for k, v in want.items() if k not in env}


def arm_lines(env: Mapping[str, str], *, root: str | None = None, entries: int = DEFAULT_ENTRIES,
              pg_timeout_min: float | None = None, shell: bool = True) -> list[str]:
    """`export` lines (shell syntax when `shell`, Slurm TaskProlog syntax otherwise) and advice lines."""
    directory = dump_dir(env, root)
    out = []
    if one_line(directory) != directory:  # not even created: a path no export line can carry
        return [note_line(f"ddpdoctor: the dump directory {directory} holds a control character: "
                          "flight-recorder dumps left unarmed", shell=shell)]
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        writable = os.access(directory, os.W_OK)
    except OSError:
        writable = False
    # every line through render.safe: TMPDIR, --dir, DDPDOCTOR_FR_ROOT and the site's fr_dir are
    # anyone's text, and a line break in one would add a line that `eval` or slurmstepd runs
    if not writable:
        return [note_line(f"ddpdoctor: cannot write {directory}: flight-recorder dumps left unarmed", shell=shell)]
    skipped = []
    for k, v in arm_vars(env, directory=directory, entries=entries).items():
        line = export_line(k, v, shell=shell)
        if line:
            out.append(line)
        else:
            skipped.append(k)
    if skipped:
        out.append(note_line(f"ddpdoctor: {', '.join(skipped)} left unset: {directory} needs quoting, "
                             "which a TaskProlog line cannot carry", shell=shell))
    if pg_timeout_min is not None:
        out.append(note_line(f"ddpdoctor: the site asks for a process-group timeout of {pg_timeout_min:g} min: "
                             f"init_process_group(..., timeout=datetime.timedelta(minutes={pg_timeout_min:g}))",
                             shell=shell))
    return out
