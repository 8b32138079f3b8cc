"""DD701-DD702: Slurm, the prolog's view of the GPUs Slurm gave a job. The cluster-wide checks of
the same category (DD711-DD720) are in checks/cluster.py.

GPU facts come from ddpdoctor/probes/nvml.py (a snapshot of every GPU and its processes); which
GPUs the job was given from the prolog's environment (SLURM_JOB_GPUS).
"""
from __future__ import annotations

from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check
from ddpdoctor.units import human_size


def _gpu_for(entry: str, gpus):
    for g in gpus:
        if (entry.isdecimal() and int(entry) == g.index) or (not entry.isdecimal() and g.uuid.startswith(entry)):
            return g
    return None


@check("DD701", "the GPUs Slurm gave the job are present", category="slurm", tags={"prolog"}, timeout=3)
def job_gpus_present(ctx):
    """## What it checks
    NVML answers, and every GPU Slurm gave the job on this node (`SLURM_JOB_GPUS` in the prolog's
    environment) is one NVML lists; with `expected_gpus` set in the site configuration, the node
    shows exactly that many GPUs.

    ## Why it matters
    A GPU that fell off the bus (`nvidia-smi`: `Unable to determine the device handle for GPU ...:
    Unknown Error`, `GPU is lost`), a driver that did not load after an update, or a gres.conf that
    promises more GPUs than the node has, all end in `CUDA error: no CUDA-capable device is detected`
    or `invalid device ordinal` in the job, after it waited in the queue and started on every node.

    ## Fix
    Check the node with `nvidia-smi` and the kernel log (`dmesg | grep -i xid`); reload the driver or
    reboot, and keep the node drained until the GPU count is right.
    """
    want = ctx.job_gpus
    expected = ctx.thresholds.expected_gpus
    if not want and not expected:
        raise Skip("the job was given no GPUs here (SLURM_JOB_GPUS unset) and thresholds.expected_gpus is 0")
    snap = ctx.gpus
    diag = Fix("look at the GPUs and the kernel log; reload the driver or reboot",
               ("nvidia-smi", "dmesg | grep -iE 'xid|nvrm' | tail"))
    if not snap.available:
        what = f"the job was given GPU(s) {','.join(want)}" if want else f"the node should have {expected} GPU(s)"
        yield Finding(Severity.ERROR, f"{what} but NVML cannot see any: {snap.error}",
                      hint="the NVIDIA driver is not loaded, or a GPU is lost", fix=diag,
                      evidence={"job_gpus": list(want), "nvml_error": snap.error}, kind="nvml")
        return
    count = len(snap.gpus)
    ev = {"job_gpus": list(want), "nvml_count": count, "expected_gpus": expected, "driver": snap.driver}
    if expected and count != expected:
        yield Finding(Severity.ERROR, f"NVML lists {count} GPU(s), the node should have {expected}",
                      hint="fewer: a GPU fell off the bus or failed to initialise; more: thresholds.expected_gpus is wrong",
                      fix=diag, evidence=ev, kind="count")
    missing = [e for e in want if _gpu_for(e, snap.gpus) is None]
    if missing:
        have = f"0-{count - 1}" if count else "none"
        yield Finding(Severity.ERROR,
                      f"Slurm gave the job GPU(s) {','.join(missing)}, which NVML does not list (it lists {count}: {have})",
                      hint="a GPU is missing, or gres.conf names more GPUs than the node has", fix=diag, evidence=ev, kind="missing")
    if not missing and not (expected and count != expected):
        yield Finding(Severity.INFO, f"{count} GPU(s) (driver {snap.driver})"
                      + (f"; the job's {','.join(want)} present" if want else ""), evidence=ev, kind="ok")


@check("DD702", "the job's GPUs are free before it starts", category="slurm", tags={"prolog"}, timeout=3)
def job_gpus_idle(ctx):
    """## What it checks
    Before the job starts, no process runs on the GPUs Slurm gave it, and none of them holds more
    memory than `max_idle_gpu_memory` (1 GiB by default).

    ## Why it matters
    A process of an earlier job that survived its end (a DataLoader worker, a zombie torchrun
    child, a process outside Slurm's cgroup) keeps its memory: the new job dies with
    `CUDA out of memory` on one rank, or NCCL fails to allocate, and the node looks healthy to Slurm.

    ## Fix
    Kill the leftover processes (`nvidia-smi --query-compute-apps=pid,process_name,used_memory
    --format=csv`), and make the Epilog kill what a job leaves behind on its GPUs.
    """
    want = ctx.job_gpus
    if not want:
        raise Skip("the job was given no GPUs here (SLURM_JOB_GPUS unset)")
    snap = ctx.gpus
    if not snap.available:
        raise Skip(f"NVML unavailable (DD701): {snap.error}")
    limit = ctx.thresholds.max_idle_gpu_memory
    clean = True
    for entry in want:
        g = _gpu_for(entry, snap.gpus)
        if g is None:
            continue  # DD701 names it
        ev = {"gpu": g.index, "uuid": g.uuid, "used": g.used, "processes": g.processes}
        if g.processes:
            clean = False
            procs = ", ".join(f"pid {p.pid} {p.name or '?'} ({human_size(p.used) if p.used is not None else '? B'})"
                              for p in g.processes[:4]) + (" ..." if len(g.processes) > 4 else "")
            yield Finding(Severity.ERROR, f"GPU {g.index} already runs {len(g.processes)} process(es) before the job starts: {procs}",
                          hint="a process of an earlier job survived it, or something outside Slurm uses the GPU",
                          fix=Fix("kill the leftover processes, and make the Epilog kill them",
                                  (f"nvidia-smi -i {g.index} --query-compute-apps=pid,process_name,used_memory --format=csv",
                                   *(f"kill -9 {p.pid}" for p in g.processes[:4]))),
                          evidence=ev, kind="busy")
        elif g.used > limit:
            clean = False
            yield Finding(Severity.ERROR,
                          f"GPU {g.index} holds {human_size(g.used)} before the job starts, with no process NVML can name "
                          f"(site maximum {human_size(limit)})",
                          hint="a process in another PID namespace (container), or memory an exited process never released",
                          fix=Fix("find the holder, or reset the GPU when nothing runs on it",
                                  ("nvidia-smi", f"nvidia-smi --gpu-reset -i {g.index}")),
                          evidence=ev, kind="memory")
    if clean:
        yield Finding(Severity.INFO, f"GPU(s) {','.join(want)} idle", kind="ok")
