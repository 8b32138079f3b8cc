"""After rank 0's verdict is out: end this job's *stopped* smoke ranks on this host.

When rank 0 exits with a failure, torchrun's agent sends SIGTERM to every other rank and waits up
to 30 s before SIGKILL (torch/distributed/elastic/multiprocessing/api.py, `close(death_sig,
timeout=30)`). A rank stopped by SIGSTOP cannot handle SIGTERM, so the prompt came back half a
minute after the verdict. Rank 0 already named that rank; nothing more can be learnt from it.

Only processes that are certainly ranks of this same smoke run are touched: children of our own
parent (the launcher's agent on this host), running `ddpdoctor smoke`, with the same launcher run
id, rendezvous endpoint and world size in their environment, and in state "stopped" (T; never "t",
a debugger's stop). Their descendants (the rank's worker, in its own session) go with them.
"""
from __future__ import annotations

import os
import signal
from typing import Callable, Mapping

_SAME_RUN = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "SLURM_JOB_ID", "SLURM_STEP_ID")


def stopped_local_ranks(env: Mapping[str, str] | None = None) -> list[tuple[int, str]]:
    """(pid, RANK) of this run's smoke ranks on this host that are stopped (SIGSTOP/SIGTSTP)."""
    import psutil

    env = os.environ if env is None else env
    mine = {k: env.get(k) for k in _SAME_RUN}
    out = []
    try:
        siblings = psutil.Process(os.getppid()).children()
    except psutil.Error:
        return []
    for p in siblings:
        if p.pid == os.getpid():
            continue
        try:
            if p.status() != psutil.STATUS_STOPPED:
                continue
            cmd = p.cmdline()
            theirs = p.environ()
        except (psutil.Error, OSError):
            continue
        if "ddpdoctor" not in " ".join(cmd) or "smoke" not in cmd:
            continue
        if any(theirs.get(k) != v for k, v in mine.items()) or theirs.get("RANK") == env.get("RANK"):
            continue
        out.append((p.pid, theirs.get("RANK", "?")))
    return out


def end_stopped_local_ranks(env: Mapping[str, str] | None = None,
                            before: Callable[[int, str], None] | None = None) -> list[tuple[int, str]]:
    """SIGKILL (the one signal a stopped process obeys) each stopped rank and its descendants;
    returns those ended. `before(pid, rank)` is called ahead of each kill: the launcher's agent sees the
    rank die and tears this process down at once (torchrun polls its workers every 0.1 s), so a line
    written after the kill was lost at CI's load. Never raises: the verdict is already out."""
    try:
        import psutil
        ended = []
        for pid, rank in stopped_local_ranks(env):
            try:
                proc = psutil.Process(pid)
                family = proc.children(recursive=True) + [proc]
            except psutil.Error:
                continue
            if before is not None:
                before(pid, rank)
            for p in family:
                try:
                    p.send_signal(signal.SIGKILL)
                except psutil.Error:
                    pass
            ended.append((pid, rank))  # the launcher reaps it: not our child, nothing to wait for
        return ended
    except Exception:  # noqa: BLE001 - a clean-up after the report must never change the exit code
        return []
