"""`ddpdoctor prolog --task` (Slurm TaskProlog=): the interface variables each task should get.

slurmstepd runs the TaskProlog as the job's user, with the task's environment, before every task
starts, and applies each `export NAME=value` line it prints to that task (and shows each `print
...` line in the task's output). Slurm takes the value verbatim up to the end of the line: no shell
quoting, so only plain interface names are ever printed.

The route is the one the kernel picks from this node to the job's first node (the usual rendezvous
host); on the first node itself, to the second one. The values are those of
ddpdoctor.checks.nic.recommended_env, the fix `ddpdoctor network` prints, in each variable's own grammar.

Unless the site config says `[task] arm = false`, the task also gets the lines `ddpdoctor arm` prints
(ddpdoctor/inspect/arm.py: flight recorder on, dumps on timeout into a per-job directory), in
TaskProlog syntax; a variable the user set is never overridden.
"""
from __future__ import annotations

import re
import socket
from typing import Mapping

from ddpdoctor.render.safe import export_line, note_line
from ddpdoctor.siteconfig import TASK_VARIABLES

_SAFE_VALUE = re.compile(r"^=?[A-Za-z0-9_.:@-]{1,64}$")  # interface names, NCCL's exact-match `=`


def route_target(nodes: list[str], me: str) -> str | None:
    """The node whose route decides the interface: the first node, or the second when we are the first."""
    others = [n for n in nodes if n != me]
    if not others:
        return None  # a single-node job talks over loopback: nothing to pin
    return nodes[0] if nodes[0] != me else others[0]


def task_lines(env: Mapping[str, str], *, variables: tuple[str, ...] = TASK_VARIABLES,
               hostname: str | None = None, timeout: float = 1.0) -> list[str]:
    """The `export` / `print` lines for one task; [] when there is nothing to set."""
    from ddpdoctor.checks.nic import recommended_env
    from ddpdoctor.facts.network import NetworkFacts
    from ddpdoctor.facts.node import RENDEZVOUS_PORT, job_nodes

    wanted = [v for v in variables if v not in env]  # a value the user set (even empty) always wins
    if not wanted:
        return []
    host = hostname or socket.gethostname()
    me = env.get("SLURMD_NODENAME") or host
    target = route_target(job_nodes(env), me)
    if target is None:
        return []
    facts = NetworkFacts(target, RENDEZVOUS_PORT, env=dict(env), probe_timeout=timeout, hostname=host)
    # node names come from the job's environment: note_line keeps each on the one `print` line
    if not facts.master_addr:
        return [note_line(f"ddpdoctor: {target} does not resolve on {me} ({facts.master_res.error}); "
                          f"{', '.join(wanted)} left unset", shell=False)]
    if facts.route is None or not facts.route.ok:
        return [note_line(f"ddpdoctor: no route from {me} to {target} ({facts.master_addr}); "
                          f"{', '.join(wanted)} left unset", shell=False)]
    rec = recommended_env(facts)
    lines = (export_line(k, rec[k], shell=False) for k in wanted if rec.get(k) and _SAFE_VALUE.match(rec[k]))
    return [line for line in lines if line]


def arm_task_lines(env: Mapping[str, str], cfg) -> list[str]:
    """`ddpdoctor arm`'s export lines for one task, as the site config (`[task]`) asks; [] when it says no."""
    if not cfg.task_arm or not env.get("SLURM_JOB_ID"):
        return []  # outside a job there is no job to arm (and no per-job directory to name)
    from ddpdoctor.inspect.arm import arm_lines
    return arm_lines(env, root=cfg.task_fr_dir or None, entries=cfg.task_fr_entries,
                     pg_timeout_min=cfg.task_pg_timeout, shell=False)
