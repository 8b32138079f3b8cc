"""DD510-DD515 (DD410, DD516, DD517 in inspect_gpu.py, inspect_armed.py): judge a running job from outside — who is stuck where, who holds memory where.

The facts (ddpdoctor/inspect/sample.py) are, per rank process on this node: rank, pid, local rank,
world size, process state, two py-spy samples of its main thread (`where`: the torch.distributed
call it is in and the user's file:line; `signature`: the whole stack) and its main thread's CPU
use between them; plus one NVML snapshot. These functions only judge them: tested with plain data.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from ddpdoctor.facts import progress
from ddpdoctor.facts.inspect import InspectContext, RankView, StackSample, Where
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check

PTRACE_FIX = ("run as root or as the job's user with kernel.yama.ptrace_scope=0, or give py-spy CAP_SYS_PTRACE",
              ("sudo sysctl kernel.yama.ptrace_scope=0",
               "sudo setcap cap_sys_ptrace+ep \"$(command -v py-spy)\"",
               "docker run --cap-add SYS_PTRACE ...   # in a container"))


def _desc(w: Where) -> str:
    if w.waiting:
        return f"in {w.call} at {w.at}"
    if w.kind in ("dataloader", "ddp", "backward"):
        return f"in {w.kind} ({w.call}) at {w.at}"
    return f"in {w.func} at {w.at} (not in a collective)"


def _ranks(rs: Sequence[int]) -> str:
    rs = sorted(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ",".join(map(str, rs))


@dataclass(frozen=True)
class RankState:
    """One rank's state: gone | stopped | unreadable | stuck | progressing | unknown, where, and why we say so."""
    state: str
    where: Where | None = None
    why: str = ""
    decide: str = ""
    kind: str = ""      # unreadable: the py-spy error kind
    pid: int = 0
    node: str = "?"


def classify(r: RankView) -> RankState:
    """Progress is judged by what moves (facts/progress.py), never by two stacks that look alike."""
    base = {"pid": r.pid, "node": r.node}
    if r.state in ("gone", "Z", "X") or any(s.kind == "gone" for s in r.samples):
        return RankState("gone", **base)
    oks = [s for s in r.samples if s.ok]
    if r.state == "T":
        return RankState("stopped", oks[0].where if oks else None, **base)
    if len(oks) < 2:
        bad = next((s for s in r.samples if not s.ok), StackSample(False))
        return RankState("unreadable", oks[0].where if oks else None, bad.error, kind=bad.kind, **base)
    a, b = oks[0], oks[-1]
    w = b.where
    m = progress.Motion(r.seconds or 1.0, a.signature != b.signature, w.waiting, r.main_thread_cpu, r.main_wakeups,
                        r.syscalls_per_s, r.collectives, r.driver)
    p = progress.judge(m)
    state = {progress.MOVING: "progressing", progress.STILL: "stuck"}.get(p.verdict, "unknown")
    return RankState(state, w, p.why, p.decide, **base)


def states(ranks: Sequence[RankView]) -> dict[int, RankState]:
    return {r.rank: classify(r) for r in ranks}


def _who(ranks: Sequence[int], st: Mapping[int, RankState]) -> str:
    """`rank 5`, or `rank 5 on node2` when the ranks come from several nodes (`inspect --gather`)."""
    if len({s.node for s in st.values()}) < 2:
        return _ranks(ranks)
    nodes = sorted({st[r].node for r in ranks})
    return f"{_ranks(ranks)} on {','.join(nodes)}"


def _waiting_groups(st: Mapping[int, RankState]) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = {}
    for rank, s in st.items():
        if s.state == "stuck" and s.where and s.where.waiting:
            groups.setdefault((s.where.call, s.where.file, s.where.line), []).append(rank)
    return groups


def _majority(groups: Mapping[tuple, list[int]]) -> tuple | None:
    if not groups:
        return None
    return max(groups, key=lambda k: (len(groups[k]), -min(groups[k])))


def require_ranks(ctx: InspectContext) -> tuple[RankView, ...]:
    if not ctx.ranks:
        raise Skip("no rank of the job on this node")
    return ctx.ranks


@check("DD510", "the job's ranks wait in the same collective at the same line", category="distributed",
       tags={"inspect"}, timeout=2)
def ranks_agree_on_collective(ctx):
    """## What it checks
    Among the ranks that did not move between two samples (same stack, main thread never woke, no
    data moved) and that are inside a torch.distributed call, all are in the same call at the same
    line of the script.

    ## Why it matters
    A collective completes only when every rank of the group calls it. A rank that calls
    `broadcast` while the others call `all_reduce` (a rank-dependent branch, an early `return`,
    a different number of batches) hangs all of them until the NCCL/Gloo timeout, 30 minutes by
    default, and the error then names no culprit.

    ## Fix
    Look at the named line of the odd rank: make every rank issue the same collectives in the same
    order (no collective under `if rank == ...`; the same number of steps on every rank, e.g. a
    `DistributedSampler` with `drop_last=True`).
    """
    st = states(require_ranks(ctx))
    groups = _waiting_groups(st)
    if len(groups) < 2:
        return
    maj = _majority(groups)
    for key, ranks in sorted(groups.items(), key=lambda kv: min(kv[1])):
        if key == maj:
            continue
        yield Finding(
            Severity.ERROR,
            f"{_who(ranks, st)} in {key[0]} at {key[1]}:{key[2]} while {len(groups[maj])} ranks wait in "
            f"{maj[0]} at {maj[1]}:{maj[2]}",
            hint=f"pid {', '.join(str(st[r].pid) for r in ranks)}; a collective completes only when every rank calls it",
            fix=Fix(f"make {_ranks(ranks)} reach {maj[0]} at {maj[1]}:{maj[2]} like the others: look for a "
                    f"rank-dependent branch before {key[1]}:{key[2]}"),
            evidence={"odd": ranks, "odd_at": list(key), "majority": groups[maj], "majority_at": list(maj),
                      "nodes": sorted({st[r].node for r in ranks})}, kind="diverged")


@check("DD511", "every rank of the job on this node is alive", category="distributed", tags={"inspect"}, timeout=2)
def ranks_alive(ctx):
    """## What it checks
    Each local rank the launcher started (0 .. LOCAL_WORLD_SIZE-1) still exists and is neither a
    zombie nor stopped (SIGSTOP, a debugger).

    ## Why it matters
    The other ranks wait for a dead or stopped rank in their next collective until the timeout;
    with NCCL nothing reports the death until then.

    ## Fix
    Read the dead rank's error (torchrun prints it with its exit code; `TORCHELASTIC_ERROR_FILE`);
    for a stopped rank, `kill -CONT <pid>` or detach the debugger.
    """
    recs = require_ranks(ctx)
    st = states(recs)
    for rank, s in sorted(st.items()):
        if s.state == "gone":
            yield Finding(Severity.ERROR, f"{_who([rank], st)} (pid {s.pid}) is gone", hint="it exited or is a zombie",
                          fix=Fix("read its error in the launcher's output or TORCHELASTIC_ERROR_FILE"),
                          evidence={"rank": rank, "pid": s.pid}, kind="gone")
        elif s.state == "stopped":
            yield Finding(Severity.ERROR, f"{_who([rank], st)} (pid {s.pid}) is stopped (state T)",
                          hint="a SIGSTOP or a debugger holds it", fix=Fix("resume it", commands=(f"kill -CONT {s.pid}",)),
                          evidence={"rank": rank, "pid": s.pid}, kind="stopped")
    by_node: dict[str, list[RankView]] = {}
    for r in recs:
        by_node.setdefault(r.node, []).append(r)
    many = len(by_node) > 1
    guessed: set[int] = set()
    for node, nrecs in sorted(by_node.items()):
        lws = {r.local_world_size for r in nrecs if r.local_world_size is not None}
        present = {r.local_rank for r in nrecs if r.local_rank is not None}
        if len(lws) != 1 or not present:
            continue
        missing = sorted(set(range(lws.pop())) - present)
        base = {r.local_rank: r.rank for r in nrecs if r.local_rank is not None}
        if missing:
            off = {r - lr for lr, r in base.items()}
            guess = [m + off.pop() for m in missing] if len(off) == 1 else []
            guessed.update(guess)
            yield Finding(Severity.ERROR,
                          f"local rank {','.join(map(str, missing))}" + (f" ({_ranks(guess)})" if guess else "")
                          + (f" on {node}" if many else "") + " is gone: no process of the job has it",
                          hint="the launcher started it; it exited, and the others wait for it",
                          fix=Fix("read its exit code and error in the launcher's output"),
                          evidence={"missing_local_ranks": missing, "ranks": guess, "node": node}, kind="absent")
    nodes = ctx.nodes
    if nodes and all(n.reported for n in nodes):
        # --gather saw every node of the step: a rank of the world that none of them has is gone
        world = Counter(r.world_size for r in recs).most_common(1)[0][0]
        absent = sorted(set(range(world or 0)) - set(st) - guessed)
        if absent:
            yield Finding(Severity.ERROR, f"{_ranks(absent)} of {world} on none of the {len(nodes)} nodes gathered: gone",
                          hint="no process on any node of the step has that rank: it exited (or runs on a node "
                               "the step did not include)",
                          fix=Fix("read its exit code and error in the launcher's output; gather every node of the job"),
                          evidence={"ranks": absent, "world": world}, kind="absent")


@check("DD512", "no rank is elsewhere while the others wait in a collective", category="distributed",
       tags={"inspect"}, timeout=2)
def ranks_not_in_collective(ctx):
    """## What it checks
    When some ranks wait in a collective, every other rank is either in a collective too or
    visibly making progress (its stack moves between samples).

    ## Why it matters
    A rank stuck outside any collective — sleeping, blocked on I/O or a lock, waiting for a
    DataLoader worker, in an endless loop at one line — never arrives, and the others wait for it
    until the timeout.

    ## Fix
    Look at the named line: a blocking read (network file system), a lock, `input()`, a DataLoader
    worker that died (`num_workers=0` to test), a `while` loop that depends on the rank.
    """
    st = states(require_ranks(ctx))
    groups = _waiting_groups(st)
    if not groups:
        return
    maj = _majority(groups)
    for rank, s in sorted(st.items()):
        w = s.where
        if s.state != "stuck" or not w or w.waiting:
            continue
        yield Finding(Severity.ERROR,
                      f"{_who([rank], st)} {_desc(w)} while {len(groups[maj])} ranks wait in {maj[0]} at {maj[1]}:{maj[2]}",
                      hint=f"pid {s.pid}: {s.why}; it never reaches the collective the others wait in",
                      fix=Fix(f"see why rank {rank} blocks at {w.at}",
                              commands=(f"py-spy dump --pid {s.pid} --native   # with C frames",)),
                      evidence={"rank": rank, "pid": s.pid, "where": w.to_dict(), "majority_at": list(maj)},
                      kind="elsewhere")


@check("DD513", "the job makes progress", category="distributed", tags={"inspect"}, timeout=2)
def job_makes_progress(ctx):
    """## What it checks
    Between two samples a short interval apart, at least one rank moved: its stack changed, its main
    thread woke (each completed wait in a collective wakes it), it made read/write system calls, or
    it computed outside a collective. Two stacks that look alike are not enough to call a rank stuck;
    when the counters cannot be read, or a main thread spins in a collective without waking, its
    progress is reported unknown with what would decide. When every rank on this node waits in the
    same collective at the same line and nothing moved, the odd rank is elsewhere: on another node,
    or gone.

    ## Why it matters
    A job whose ranks all sit in one collective is hung even though nothing on this node looks
    odd; the rank that holds it up is on another node.

    ## Fix
    Inspect every node at once: `srun --jobid <id> --overlap -N <n> --ntasks-per-node 1 ddpdoctor
    inspect`, or run `ddpdoctor inspect` on each node of the job.
    """
    recs = require_ranks(ctx)
    st = states(recs)
    live = {r: s for r, s in st.items() if s.state in ("stuck", "progressing", "unknown")}
    if not live or any(s.state == "progressing" for s in live.values()):
        return
    unknown = sorted(r for r, s in live.items() if s.state == "unknown")
    if unknown:  # weak evidence: say so, and what would decide, never "hung"
        s0 = live[unknown[0]]
        yield Finding(Severity.WARNING, f"progress unknown for {_who(unknown, st)}: {s0.why}",
                      hint=f"decide: {s0.decide}", evidence={"ranks": unknown}, kind="unknown")
        return
    groups = _waiting_groups(live)
    if not groups:
        where = "; ".join(f"rank {r} {_desc(s.where)}" for r, s in sorted(live.items()) if s.where)
        yield Finding(Severity.WARNING, f"no rank moved in {ctx.interval:.1f} s and none is in a collective: {where}",
                      hint="a long computation in one C call, blocking I/O, or sleeping: sample again to be sure",
                      fix=Fix("inspect again with a longer interval", commands=("ddpdoctor inspect --interval 5",)),
                      evidence={"ranks": sorted(live)}, kind="no-progress")
        return
    if len(groups) != 1 or len(next(iter(groups.values()))) != len(live):
        return  # DD510/DD512 name the odd rank
    (call, file, line), ranks = next(iter(groups.items()))
    world = Counter(r.world_size for r in recs).most_common(1)[0][0]
    elsewhere = sorted(set(range(world)) - set(st)) if world else []
    where = (f"; {_ranks(elsewhere)} run elsewhere: one of them is the odd one" if elsewhere
             else "; every rank of the world is here, so a rank in a subgroup or the store holds it up")
    yield Finding(Severity.ERROR,
                  f"all {len(ranks)} ranks on {ctx.host} wait in {call} at {file}:{line} for {ctx.interval:.1f}+ s{where}",
                  hint="same stack in every sample",
                  fix=Fix("inspect the other nodes of the job",
                          commands=("srun --jobid $SLURM_JOB_ID --overlap -N $SLURM_NNODES --ntasks-per-node 1 ddpdoctor inspect",)),
                  evidence={"ranks": ranks, "at": [call, file, line], "elsewhere": elsewhere}, kind="all-waiting")


@check("DD514", "py-spy reads every rank's stack", category="distributed", tags={"inspect"}, timeout=2)
def stacks_readable(ctx):
    """## What it checks
    `py-spy dump --nonblocking` returned the Python stack of every rank process.

    ## Why it matters
    Without the stacks, `inspect` cannot tell where a rank is. py-spy needs ptrace rights over the
    job's processes: root, CAP_SYS_PTRACE, or the same user with `kernel.yama.ptrace_scope=0`.

    ## Fix
    `sudo sysctl kernel.yama.ptrace_scope=0` (as the job's user), run as root, give py-spy
    CAP_SYS_PTRACE (`setcap cap_sys_ptrace+ep`), or `--cap-add SYS_PTRACE` for a container.
    """
    recs = require_ranks(ctx)
    perm = [r.rank for r in recs if any(s.kind == "permission" for s in r.samples)]
    if perm:
        yield Finding(Severity.ERROR, f"py-spy may not read {_ranks(perm)}: no ptrace rights over the job's processes",
                      hint="root, CAP_SYS_PTRACE, or kernel.yama.ptrace_scope=0 for a process of your own user",
                      fix=Fix(PTRACE_FIX[0], commands=PTRACE_FIX[1]), evidence={"ranks": perm}, kind="ptrace")
    for r in recs:
        bad = [s for s in r.samples if not s.ok and s.kind not in ("permission", "gone")]
        if bad:
            yield Finding(Severity.WARNING, f"py-spy could not read rank {r.rank} (pid {r.pid}): {bad[0].error}",
                          evidence={"rank": r.rank, "pid": r.pid, "errors": [s.error for s in bad]}, kind="unreadable")


@check("DD515", "every node of the step reported its ranks (inspect --gather)", category="distributed",
       tags={"inspect"}, timeout=2)
def gathered_nodes_reported(ctx):
    """## What it checks
    With `inspect --gather`, every node of the srun step published its view in time and has at
    least one process of the job.

    ## Why it matters
    A node that never reports (its task did not start, it could not reach the first node's store,
    or its py-spy overran the deadline) hides its ranks: the odd rank may be among them. A node
    with no process of the job lost its ranks (they exited) or is not part of the job's step.

    ## Fix
    For a node that did not report: run `ddpdoctor inspect` on it directly, raise `--deadline`, or
    check that the first node's `--store-port` is reachable. For a node without ranks: read the
    launcher's output for the ranks that exited there.
    """
    if not ctx.nodes:
        raise Skip("not a --gather run")
    for n in ctx.nodes:
        if not n.reported:
            yield Finding(Severity.ERROR, f"{n.node} did not report within the deadline: its ranks are unknown",
                          hint="its task did not start, could not reach the store on the first node, or overran",
                          fix=Fix(f"inspect it directly: ssh {n.node} ddpdoctor inspect; or raise --deadline"),
                          evidence={"node": n.node}, kind="no-report")
        elif n.error:
            yield Finding(Severity.ERROR, f"{n.node}: {n.error}",
                          hint="its ranks exited, or the step includes a node the job does not run on",
                          fix=Fix("read the launcher's output for the ranks that ran on it"),
                          evidence={"node": n.node}, kind="error")
