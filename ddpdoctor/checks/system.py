"""DD6xx: node limits and resources a distributed job needs before it starts: /dev/shm, locked memory.

The facts come from ddpdoctor/probes/system.py (through ddpdoctor.facts.node.PrologFacts); the
thresholds from the site configuration ([thresholds] in /etc/ddpdoctor.toml).
"""
from __future__ import annotations

import stat

from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check
from ddpdoctor.units import human_size


@check("DD601", "/dev/shm is large enough", category="system", tags={"prolog"}, timeout=2)
def dev_shm_large_enough(ctx):
    """## What it checks
    The size of the filesystem on `/dev/shm`, and the space still free in it, against the site
    minimum (`min_dev_shm`, 1 GiB unless `/etc/ddpdoctor.toml` says otherwise). When space is
    short, the largest files there are named.

    ## Why it matters
    NCCL's shared-memory transport between the GPUs of a node and the DataLoader's worker
    processes both live in `/dev/shm`. A container-sized `/dev/shm` (Docker's default is 64 MB)
    fails NCCL's init with `Error while creating shared memory segment` or kills DataLoader workers
    with `Bus error`; segments left behind by crashed jobs (`nccl-*`, `torch_*`) fill a large one the same way.

    ## Fix
    Remount it larger (`mount -o remount,size=50% /dev/shm`, or `--shm-size` / `--ipc=host` for
    containers) and remove what earlier jobs left behind (a Slurm Epilog that empties `/dev/shm`).
    """
    shm = ctx.shm
    need = ctx.thresholds.min_dev_shm
    if not shm.exists:
        yield Finding(Severity.ERROR, f"{shm.path} {shm.error}",
                      hint="NCCL's shared-memory transport and DataLoader workers need it",
                      fix=Fix("mount a tmpfs on /dev/shm", ("mount -t tmpfs -o mode=1777,size=50% tmpfs /dev/shm",)), kind="unreadable")
        return
    ev = {"path": shm.path, "size": shm.size, "free": shm.free, "min_dev_shm": need,
          "fstype": shm.mount.fstype if shm.mount else None, "largest": [list(t) for t in shm.largest]}
    if shm.size < need:
        yield Finding(Severity.ERROR, f"{shm.path} is {human_size(shm.size)}, below the site minimum of {human_size(need)}",
                      hint="NCCL fails with 'Error while creating shared memory segment'; DataLoader workers die with 'Bus error'",
                      fix=Fix(f"remount {shm.path} with at least {human_size(need)}",
                              (f"mount -o remount,size={max(need, 1 << 30) >> 20}M {shm.path}", f"df -h {shm.path}")),
                      evidence=ev, kind="small")
        return
    if shm.free < need:
        top = ", ".join(f"{n} ({human_size(b)})" for n, b in shm.largest[:3]) or "no files (memory held by open segments)"
        yield Finding(Severity.ERROR,
                      f"{shm.path} has {human_size(shm.free)} free of {human_size(shm.size)}, below the site minimum of "
                      f"{human_size(need)}",
                      hint=f"largest there: {top}; earlier jobs often leave nccl-* and torch_* segments behind",
                      fix=Fix("remove what earlier jobs left in /dev/shm (and empty it in the Slurm Epilog)",
                              (f"ls -laS {shm.path} | head", f"find {shm.path} -mindepth 1 -user <old-job-user> -delete")),
                      evidence=ev, kind="full")
        return
    yield Finding(Severity.INFO, f"{shm.path}: {human_size(shm.free)} free of {human_size(shm.size)}", evidence=ev, kind="ok")


@check("DD602", "/dev/shm is writable by every user", category="system", tags={"prolog"}, timeout=2)
def dev_shm_writable(ctx):
    """## What it checks
    `/dev/shm` is mounted read-write with mode `1777` (writable by all, sticky), so the job's user
    can create shared-memory segments there.

    ## Why it matters
    NCCL fails its init with `Call to shm_open failed : Permission denied` when the training user
    cannot create files there, and PyTorch's DataLoader cannot share tensors between processes.
    Prolog scripts run as root, so only the mode and the mount tell what an ordinary user gets.

    ## Fix
    `chmod 1777 /dev/shm` and mount it read-write (`mount -o remount,rw /dev/shm`).
    """
    shm = ctx.shm
    if not shm.exists:
        raise Skip(f"{shm.path} {shm.error} (DD601)")
    if shm.mount is not None and shm.mount.readonly:
        yield Finding(Severity.ERROR, f"{shm.path} is mounted read-only",
                      fix=Fix("remount it read-write", (f"mount -o remount,rw {shm.path}",)),
                      evidence={"options": list(shm.mount.options)}, kind="read-only")
    want = stat.S_ISVTX | 0o777
    if shm.mode & want != want:
        yield Finding(Severity.ERROR, f"{shm.path} has mode {shm.mode:04o}: users cannot all create segments there (want 1777)",
                      hint="NCCL: 'Call to shm_open failed : Permission denied'",
                      fix=Fix("restore the usual mode", (f"chmod 1777 {shm.path}",)), evidence={"mode": f"{shm.mode:04o}"}, kind="mode")



# Appends the setting only where slurm.conf sets neither PropagateResourceLimits nor ...Except (slurmctld
# refuses both at once, and a second ...Except line would override the first): where one is set, the
# command prints it to edit by hand. After a newline: a last line without one keeps its value.
SLURM_CONF_MEMLOCK = (
    "test -f /etc/slurm/slurm.conf && { grep -iE '^[[:space:]]*PropagateResourceLimits' /etc/slurm/slurm.conf "
    "|| printf '\\nPropagateResourceLimitsExcept=MEMLOCK\\n' | sudo tee -a /etc/slurm/slurm.conf >/dev/null; }"
    "   # a line printed: add MEMLOCK to it by hand; then the same slurm.conf on every node, scontrol reconfigure")


@check("DD603", "the locked-memory limit allows RDMA", category="system", tags={"prolog"}, timeout=2)
def memlock_allows_rdma(ctx):
    """## What it checks
    Where the node has RDMA devices (`/sys/class/infiniband`: InfiniBand, RoCE), the soft
    `RLIMIT_MEMLOCK` (`ulimit -l`) is at least the site minimum (`min_memlock`, `unlimited` by default).
    In a Slurm prolog this is slurmd's limit, which the job's tasks inherit unless
    `PropagateResourceLimits` copies the submitting shell's.

    ## Why it matters
    RDMA pins the buffers it sends from, and pinned memory counts against this limit. With a low
    limit (8 MB on many distributions, 64 KB in Docker) NCCL warns `Call to ibv_reg_mr failed with
    error Cannot allocate memory` and fails, or silently falls back to TCP sockets.

    ## Fix
    Raise it where slurmd starts (`LimitMEMLOCK=infinity` in slurmd's systemd unit), and set
    `PropagateResourceLimitsExcept=MEMLOCK` in slurm.conf so jobs keep it; `memlock unlimited` in
    /etc/security/limits.conf for logins.
    """
    lim = ctx.memlock
    need = ctx.thresholds.min_memlock
    ev = {"soft": lim.soft, "hard": lim.hard, "min_memlock": need, "rdma_devices": list(ctx.rdma)}
    if not ctx.rdma:
        yield Finding(Severity.INFO, f"locked memory {human_size(lim.soft)}; no RDMA devices, so NCCL uses TCP sockets",
                      evidence=ev, kind="ok")
        return
    enough = lim.soft is None or (need is not None and lim.soft >= need)
    if enough:
        yield Finding(Severity.INFO, f"locked memory {human_size(lim.soft)} for RDMA devices {', '.join(ctx.rdma)}",
                      evidence=ev, kind="ok")
        return
    yield Finding(Severity.ERROR,
                  f"locked memory is limited to {human_size(lim.soft)} (site minimum {human_size(need)}) on a node with "
                  f"RDMA devices {', '.join(ctx.rdma)}",
                  hint="NCCL: 'Call to ibv_reg_mr failed with error Cannot allocate memory', or a silent fall-back to TCP",
                  fix=Fix("raise RLIMIT_MEMLOCK where slurmd starts and keep it in jobs",
                          ("systemctl edit slurmd   # [Service] LimitMEMLOCK=infinity",
                           SLURM_CONF_MEMLOCK,
                           "srun -N1 bash -c 'ulimit -l'   # expect: unlimited")),
                  evidence=ev, kind="low")
