"""DD820-DD829: the launch command (`ddpdoctor run -- torchrun ...`), judged before it starts.

The context is a launch-facts object (ddpdoctor/runcmd/facts.py): `args` (torchrun's own parse of
the command, or None), `nnodes` ((min, max) or torch's parse error), `multi_node`, `endpoint`
(host, port, problem), `gpus` (None when unknown), `script_path`, `spec`, `env`.
"""
from __future__ import annotations

import ipaddress

from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check

RUN = {"run"}


def _torchrun(ctx):
    if ctx.args is None:
        raise Skip("not a torchrun command" if not ctx.spec.torchrun_error else "torchrun refused the arguments")
    return ctx.args


@check("DD820", "--standalone is single-node", category="env", tags=RUN, timeout=1)
def standalone_multi_node(ctx):
    """## What it checks
    `torchrun --standalone` together with `--nnodes` allowing more than one node.

    ## Why it matters
    `--standalone` starts a private rendezvous on `localhost` with a random port on every node: the
    nodes never meet; each waits for `--nnodes` peers until the rendezvous times out.

    ## Fix
    Drop `--standalone` and give every node the same `--rdzv-backend=c10d --rdzv-endpoint=HOST:PORT
    --rdzv-id=JOBID`, or use `--nnodes=1`.
    """
    a = _torchrun(ctx)
    if a.standalone and ctx.multi_node:
        yield Finding(Severity.ERROR, f"--standalone with --nnodes={a.nnodes}: each node starts its own rendezvous "
                                      "on localhost and waits for peers that never come",
                      fix=Fix("use a shared endpoint instead of --standalone",
                              ("torchrun --nnodes=N --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:29400 "
                               "--rdzv-id=$SLURM_JOB_ID ...",)),
                      evidence={"nnodes": a.nnodes})


@check("DD821", "A multi-node rendezvous has a shared id", category="env", tags=RUN, timeout=1)
def rdzv_id_shared(ctx):
    """## What it checks
    A multi-node c10d rendezvous without `--rdzv-id` (torchrun's default id is the string "none"),
    an id that still contains an unexpanded `$` (a quoted `$RANDOM`/`$(...)`), or, inside a Slurm
    allocation, an id that is not the job id.

    ## Why it matters
    Every node of one job must pass the *same* id, and different jobs sharing an endpoint must pass
    different ones. The default "none" lets a second job join the first one's rendezvous;
    `--rdzv-id=$RANDOM` differs on every node, so no two nodes ever meet.

    ## Fix
    Use an id every node of the job shares and no other job has: `--rdzv-id=$SLURM_JOB_ID`.
    """
    a = _torchrun(ctx)
    if not ctx.multi_node or a.standalone or a.rdzv_backend != "c10d":
        raise Skip("single node or no c10d rendezvous")
    rid = a.rdzv_id
    job = ctx.env.get("SLURM_JOB_ID")
    fix = Fix("pass the same id on every node, unique to this job", ("--rdzv-id=$SLURM_JOB_ID",))
    if rid in (None, "", "none"):
        yield Finding(Severity.WARNING, f"--nnodes={a.nnodes} with no --rdzv-id (torchrun uses 'none'): another job "
                                        "on the same endpoint joins this rendezvous", fix=fix, kind="no-id")
    elif "$" in rid or "`" in rid:
        yield Finding(Severity.ERROR, f"--rdzv-id={rid!r} was not expanded by a shell; if each node expands it "
                                      "itself (e.g. $RANDOM) every node gets a different id and none meet", fix=fix, kind="unexpanded")
    elif job and rid != job and not rid.startswith(job):
        yield Finding(Severity.WARNING, f"--rdzv-id={rid} is not this Slurm job's id ({job}): if it comes from "
                                        "$RANDOM or a timestamp, each node has its own and the nodes never meet",
                      fix=fix, evidence={"rdzv_id": rid, "SLURM_JOB_ID": job}, kind="not-job-id")


@check("DD822", "The rendezvous endpoint is well-formed", category="env", tags=RUN, timeout=1)
def endpoint_well_formed(ctx):
    """## What it checks
    `--rdzv-endpoint` (or `--master-addr`/`--master-port` with the static backend) parses as
    `host[:port]` / `[v6]:port` with a port in 0-65535, and `--nnodes` as `N` or `MIN:MAX`.

    ## Why it matters
    torchrun fails on these only after it started, with a traceback from deep in the rendezvous
    handler ("invalid literal for int()", "port out of range"), on every node.

    ## Fix
    Write the endpoint as `HOST:PORT`, e.g. `--rdzv-endpoint=node001:29400`.
    """
    a = _torchrun(ctx)
    if isinstance(ctx.nnodes, str):
        yield Finding(Severity.ERROR, ctx.nnodes, fix=Fix("write --nnodes as N or MIN:MAX, e.g. --nnodes=2"), kind="bad-nnodes")
    ep = ctx.endpoint
    if ep is not None and ep.problem:
        yield Finding(Severity.ERROR, f"rendezvous endpoint {ep.problem}",
                      fix=Fix("write it as HOST:PORT", ("--rdzv-endpoint=node001:29400",)), kind="bad-endpoint")
    if ep is None and ctx.multi_node and not a.standalone:
        yield Finding(Severity.ERROR, f"--nnodes={a.nnodes} with no --rdzv-endpoint: torchrun has no address for the "
                                      "nodes to meet at",
                      fix=Fix("name the first node's address", ("--rdzv-endpoint=$MASTER_ADDR:29400",)), kind="no-endpoint")


def _loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@check("DD823", "A multi-node endpoint is not a loopback address", category="env", tags=RUN, timeout=1)
def endpoint_not_loopback(ctx):
    """## What it checks
    A multi-node launch whose rendezvous endpoint is `localhost`, `127.x.x.x` or `::1`.

    ## Why it matters
    Each node then dials itself: node 0 waits for peers that connect to their own loopback, and the
    rendezvous times out on every node.

    ## Fix
    Use the first node's real name or address: `--rdzv-endpoint=$(scontrol show hostnames
    $SLURM_JOB_NODELIST | head -n1):29400`.
    """
    _torchrun(ctx)
    ep = ctx.endpoint
    if ctx.multi_node and ep is not None and not ep.problem and _loopback(ep.host):
        yield Finding(Severity.ERROR, f"endpoint {ep.text!r} is a loopback address but --nnodes={ctx.args.nnodes}: "
                                      "every node rendezvouses with itself",
                      fix=Fix("use the first node's hostname",
                              ("--rdzv-endpoint=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1):29400",)))


@check("DD824", "--nproc-per-node fits the GPUs present", category="env", tags=RUN, timeout=3)
def nproc_fits_gpus(ctx):
    """## What it checks
    A numeric `--nproc-per-node` larger than the GPUs this node can use (NVML's count, narrowed by
    `CUDA_VISIBLE_DEVICES`), when the script uses CUDA.

    ## Why it matters
    The extra workers either crash with "invalid device ordinal" when they bind their device, or
    share a GPU with another rank, which NCCL refuses ("Duplicate GPU detected").

    ## Fix
    Use `--nproc-per-node=gpu` (one worker per visible GPU), or the number of GPUs present.
    """
    a = _torchrun(ctx)
    try:
        n = int(a.nproc_per_node)
    except (TypeError, ValueError):
        raise Skip(f"--nproc-per-node={a.nproc_per_node} is resolved by torchrun itself") from None
    gpus = ctx.gpus
    if gpus is None:
        raise Skip("no NVIDIA driver here: GPU count unknown")
    if gpus and n > gpus:
        yield Finding(Severity.ERROR, f"--nproc-per-node={n} but this node has {gpus} usable GPU(s)"
                      + (f" (CUDA_VISIBLE_DEVICES={ctx.env['CUDA_VISIBLE_DEVICES']})"
                         if "CUDA_VISIBLE_DEVICES" in ctx.env else ""),
                      fix=Fix("one worker per GPU", ("--nproc-per-node=gpu",)), evidence={"gpus": gpus})


@check("DD825", "--node-rank is within --nnodes", category="env", tags=RUN, timeout=1)
def node_rank_in_range(ctx):
    """## What it checks
    `--node-rank` is between 0 and the largest `--nnodes` minus one.

    ## Why it matters
    With the static rendezvous the node rank places the node's workers in the global rank order; an
    out-of-range value makes ranks beyond WORLD_SIZE, and the store waits forever for the missing ones.

    ## Fix
    Number the nodes 0..N-1, e.g. `--node-rank=$SLURM_NODEID`.
    """
    a = _torchrun(ctx)
    n = ctx.nnodes
    if isinstance(n, str):
        raise Skip("--nnodes does not parse (DD822)")
    if not 0 <= a.node_rank < n[1]:
        yield Finding(Severity.ERROR, f"--node-rank={a.node_rank} is outside 0..{n[1] - 1} (--nnodes={a.nnodes})",
                      fix=Fix("number the nodes from 0", ("--node-rank=$SLURM_NODEID",)))


@check("DD826", "The training script exists", category="env", tags=RUN, timeout=1)
def script_exists(ctx):
    """## What it checks
    The training script named in the command is a readable file (relative to the working directory,
    or srun's `--chdir`).

    ## Why it matters
    Otherwise every worker on every node fails at once with "can't open file", after the rendezvous
    and the allocation were already paid for.

    ## Fix
    Give the script's path as seen from where the job starts (often: an absolute path).
    """
    p = ctx.script_path
    if p is None:
        raise Skip("no script file (a -m module or --no-python command)")
    if not p.is_file():
        yield Finding(Severity.ERROR, f"training script {ctx.spec.script!r} does not exist"
                      + ("" if p == ctx.spec.script else f" (looked at {p})"),
                      fix=Fix("give the script's path as seen from the job's working directory"))


@check("DD827", "torchrun accepts the arguments", category="env", tags=RUN, timeout=1)
def torchrun_accepts(ctx):
    """## What it checks
    torchrun's own argument parser (read from the installed torch) accepts the command line.

    ## Why it matters
    A misspelled option makes torchrun print its usage and exit 2 on every node.

    ## Fix
    Correct the option; `torchrun --help` lists them.
    """
    if ctx.spec.kind != "torchrun":
        raise Skip("not a torchrun command")
    if ctx.spec.torchrun_error:
        yield Finding(Severity.ERROR, f"torchrun would refuse this command: {ctx.spec.torchrun_error}",
                      fix=Fix("correct the option (torchrun --help lists them)"))


@check("DD828", "torch.distributed.launch is deprecated", category="env", tags=RUN, timeout=1)
def legacy_launch(ctx):
    """## What it checks
    `python -m torch.distributed.launch` instead of `torchrun`.

    ## Why it matters
    launch is deprecated; on torch >= 2.0 it passes `--local-rank=N` to the script, which scripts
    written for `--local_rank` reject ("unrecognized arguments"), and it does not set `--use-env`
    unless asked.

    ## Fix
    Launch with `torchrun` (same options) and read `LOCAL_RANK` from the environment.
    """
    if ctx.spec.legacy_launch:
        yield Finding(Severity.WARNING, "python -m torch.distributed.launch is deprecated and passes --local-rank=N "
                                        "to the script",
                      fix=Fix("use torchrun with the same options", ("torchrun " + " ".join(ctx.spec.argv[3:]),)))


@check("DD829", "srun's node count matches torchrun's --nnodes", category="env", tags=RUN, timeout=1)
def srun_nodes_match(ctx):
    """## What it checks
    `srun -N K torchrun ...` (or `--nodes=K`, or SLURM_NNODES in a job step) with K > 1 while torchrun's
    `--nnodes` allows at most one node (its default is 1).

    ## Why it matters
    Each of the K nodes then runs its own single-node torchrun: K independent trainings that never
    talk to each other, each writing the same checkpoints, at K times the cost — with no error.

    ## Fix
    Pass the node count to torchrun too, with a shared endpoint:
    `--nnodes=$SLURM_NNODES --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:29400 --rdzv-id=$SLURM_JOB_ID`.
    """
    a = _torchrun(ctx)
    if "srun" not in ctx.spec.wrappers:
        raise Skip("not launched through srun")
    raw = ctx.spec.srun_opts.get("-N") or ctx.spec.srun_opts.get("--nodes") or ctx.env.get("SLURM_NNODES") or "1"
    try:
        k = int(str(raw).split("-")[-1])  # -N 2 or -N 2-4: the largest count
    except ValueError:
        raise Skip(f"srun node count {raw!r} not a number") from None
    n = ctx.nnodes
    if k > 1 and isinstance(n, tuple) and n[1] == 1:
        yield Finding(Severity.ERROR, f"srun starts torchrun on {k} nodes but --nnodes={a.nnodes}: {k} separate "
                                      "single-node trainings that never meet",
                      fix=Fix("tell torchrun about the nodes",
                              ("--nnodes=$SLURM_NNODES --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:29400 "
                               "--rdzv-id=$SLURM_JOB_ID",)),
                      evidence={"srun_nodes": k, "nnodes": a.nnodes})
