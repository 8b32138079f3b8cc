"""DD410, DD510-DD514: judge a running job from outside — who is stuck where, who holds memory where.

The facts (ddpdoctor/inspect/sample.py) are, per rank process on this node: rank, pid, local rank,
world size, process state, two py-spy samples of its main thread (`where`: the torch.distributed
call it is in and the user's file:line; `signature`: the whole stack) and its main thread's CPU
use between them; plus one NVML snapshot. These functions only judge them: tested with plain data.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from ddpdoctor.checks.gpu import SET_DEVICE_CODE, misplaced, mib
from ddpdoctor.facts.smoke import GpuView, RankRecord
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check

PTRACE_FIX = ("run as root or as the job's user with kernel.yama.ptrace_scope=0, or give py-spy CAP_SYS_PTRACE",
              ("sudo sysctl kernel.yama.ptrace_scope=0",
               "sudo setcap cap_sys_ptrace+ep \"$(command -v py-spy)\"",
               "docker run --cap-add SYS_PTRACE ...   # in a container"))
# Below this share of one core, a main thread with an unchanged stack is waiting, not computing.
IDLE_CPU = 0.2


def _at(w: Mapping[str, Any]) -> str:
    return f"{w['file']}:{w['line']}"


def _desc(w: Mapping[str, Any]) -> str:
    if w["kind"] in ("collective", "init", "distributed"):
        return f"in {w['call']} at {_at(w)}"
    if w["kind"] in ("dataloader", "ddp", "backward"):
        return f"in {w['kind']} ({w['call']}) at {_at(w)}"
    return f"in {w['func']} at {_at(w)} (not in a collective)"


def _ranks(rs: Sequence[int]) -> str:
    rs = sorted(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ",".join(map(str, rs))


def classify(rec: Mapping[str, Any]) -> dict[str, Any]:
    """One rank's state: gone | unreadable | stuck | progressing, where it is, and why we say so."""
    if rec.get("state") in ("gone", "Z", "X") or any(s.get("kind") == "gone" for s in rec["samples"]):
        return {"state": "gone", "where": None}
    if rec.get("state") == "T":
        w = next((s["where"] for s in rec["samples"] if s.get("ok")), None)
        return {"state": "stopped", "where": w}
    oks = [s for s in rec["samples"] if s.get("ok")]
    if len(oks) < 2:
        bad = next((s for s in rec["samples"] if not s.get("ok")), {})
        return {"state": "unreadable", "where": oks[0]["where"] if oks else None, "why": bad.get("error", ""),
                "kind": bad.get("kind", "")}
    a, b = oks[0], oks[-1]
    same = a["signature"] == b["signature"]
    cpu = rec.get("main_thread_cpu")
    w = b["where"]
    if not same:
        return {"state": "progressing", "where": w, "why": "its stack changed between the samples"}
    if w["kind"] in ("collective", "init", "distributed") or cpu is None or cpu < IDLE_CPU:
        return {"state": "stuck", "where": w, "why": "same stack in both samples" + ("" if cpu is None else f", {cpu:.0%} CPU")}
    return {"state": "progressing", "where": w, "why": f"same line but computing ({cpu:.0%} CPU)"}


def states(records: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["rank"]: {**classify(r), "pid": r["pid"], "node": _node(r)} for r in records}


def _node(rec: Mapping[str, Any]) -> str:
    return rec.get("node") or rec.get("host") or "?"


def _who(ranks: Sequence[int], st: Mapping[int, Mapping]) -> str:
    """`rank 5`, or `rank 5 on node2` when the ranks come from several nodes (`inspect --gather`)."""
    if len({s.get("node") for s in st.values()}) < 2:
        return _ranks(ranks)
    nodes = sorted({st[r]["node"] for r in ranks})
    return f"{_ranks(ranks)} on {','.join(nodes)}"


def _waiting_groups(st: Mapping[int, Mapping]) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = {}
    for rank, s in st.items():
        w = s.get("where")
        if s["state"] == "stuck" and w and w["kind"] in ("collective", "init", "distributed"):
            groups.setdefault((w["call"], w["file"], w["line"]), []).append(rank)
    return groups


def _majority(groups: Mapping[tuple, list[int]]) -> tuple | None:
    if not groups:
        return None
    return max(groups, key=lambda k: (len(groups[k]), -min(groups[k])))


def _require_ranks(ctx) -> list[Mapping[str, Any]]:
    if not ctx.facts.ranks:
        raise Skip("no rank of the job on this node")
    return ctx.facts.ranks


@check("DD510", "the job's ranks wait in the same collective at the same line", category="distributed",
       tags={"inspect"}, timeout=2)
def ranks_agree_on_collective(ctx):
    """## What it checks
    Among the ranks whose stack did not move between two samples and that are inside a
    torch.distributed call, all are in the same call at the same line of the script.

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
    st = states(_require_ranks(ctx))
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
            hint=f"pid {', '.join(str(st[r]['pid']) for r in ranks)}; a collective completes only when every rank calls it",
            fix=Fix(f"make {_ranks(ranks)} reach {maj[0]} at {maj[1]}:{maj[2]} like the others: look for a "
                    f"rank-dependent branch before {key[1]}:{key[2]}"),
            evidence={"odd": ranks, "odd_at": list(key), "majority": groups[maj], "majority_at": list(maj),
                      "nodes": sorted({st[r]["node"] for r in ranks})}, kind="diverged")


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
    recs = _require_ranks(ctx)
    st = states(recs)
    for rank, s in sorted(st.items()):
        if s["state"] == "gone":
            yield Finding(Severity.ERROR, f"{_who([rank], st)} (pid {s['pid']}) is gone", hint="it exited or is a zombie",
                          fix=Fix("read its error in the launcher's output or TORCHELASTIC_ERROR_FILE"),
                          evidence={"rank": rank, "pid": s["pid"]}, kind="gone")
        elif s["state"] == "stopped":
            yield Finding(Severity.ERROR, f"{_who([rank], st)} (pid {s['pid']}) is stopped (state T)",
                          hint="a SIGSTOP or a debugger holds it", fix=Fix("resume it", commands=(f"kill -CONT {s['pid']}",)),
                          evidence={"rank": rank, "pid": s["pid"]}, kind="stopped")
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for r in recs:
        by_node.setdefault(_node(r), []).append(r)
    many = len(by_node) > 1
    guessed: set[int] = set()
    for node, nrecs in sorted(by_node.items()):
        lws = {int(r["env"]["LOCAL_WORLD_SIZE"]) for r in nrecs if str(r.get("env", {}).get("LOCAL_WORLD_SIZE", "")).isdigit()}
        present = {r["local_rank"] for r in nrecs if r.get("local_rank") is not None}
        if len(lws) != 1 or not present:
            continue
        missing = sorted(set(range(lws.pop())) - present)
        base = {r["local_rank"]: r["rank"] for r in nrecs if r.get("local_rank") is not None}
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
    nodes = getattr(ctx.facts, "nodes", None) or []
    if nodes and all(n.get("reported") for n in nodes):
        # --gather saw every node of the step: a rank of the world that none of them has is gone
        world = Counter(r.get("world_size") for r in recs).most_common(1)[0][0]
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
    st = states(_require_ranks(ctx))
    groups = _waiting_groups(st)
    if not groups:
        return
    maj = _majority(groups)
    for rank, s in sorted(st.items()):
        w = s.get("where")
        if s["state"] != "stuck" or not w or w["kind"] in ("collective", "init", "distributed"):
            continue
        yield Finding(Severity.ERROR,
                      f"{_who([rank], st)} {_desc(w)} while {len(groups[maj])} ranks wait in {maj[0]} at {maj[1]}:{maj[2]}",
                      hint=f"pid {s['pid']}: {s.get('why', '')}; it never reaches the collective the others wait in",
                      fix=Fix(f"see why rank {rank} blocks at {_at(w)}",
                              commands=(f"py-spy dump --pid {s['pid']} --native   # with C frames",)),
                      evidence={"rank": rank, "pid": s["pid"], "where": w, "majority_at": list(maj)}, kind="elsewhere")


@check("DD513", "the job makes progress", category="distributed", tags={"inspect"}, timeout=2)
def job_makes_progress(ctx):
    """## What it checks
    Between two samples a short interval apart, at least one rank's stack moved. When every rank on
    this node waits in the same collective at the same line, the odd rank is elsewhere: on
    another node, or gone.

    ## Why it matters
    A job whose ranks all sit in one collective is hung even though nothing on this node looks
    odd; the rank that holds it up is on another node.

    ## Fix
    Inspect every node at once: `srun --jobid <id> --overlap -N <n> --ntasks-per-node 1 ddpdoctor
    inspect`, or run `ddpdoctor inspect` on each node of the job.
    """
    recs = _require_ranks(ctx)
    st = states(recs)
    live = {r: s for r, s in st.items() if s["state"] in ("stuck", "progressing")}
    if not live or any(s["state"] == "progressing" for s in live.values()):
        return
    groups = _waiting_groups(live)
    if not groups:
        where = "; ".join(f"rank {r} {_desc(s['where'])}" for r, s in sorted(live.items()) if s.get("where"))
        yield Finding(Severity.WARNING, f"no rank moved in {ctx.facts.interval:.1f} s and none is in a collective: {where}",
                      hint="a long computation in one C call, blocking I/O, or sleeping: sample again to be sure",
                      fix=Fix("inspect again with a longer interval", commands=("ddpdoctor inspect --interval 5",)),
                      evidence={"ranks": sorted(live)}, kind="no-progress")
        return
    if len(groups) != 1 or len(next(iter(groups.values()))) != len(live):
        return  # DD510/DD512 name the odd rank
    (call, file, line), ranks = next(iter(groups.items()))
    world = Counter(r.get("world_size") for r in recs).most_common(1)[0][0]
    elsewhere = sorted(set(range(world)) - set(st)) if world else []
    where = (f"; {_ranks(elsewhere)} run elsewhere: one of them is the odd one" if elsewhere
             else "; every rank of the world is here, so a rank in a subgroup or the store holds it up")
    yield Finding(Severity.ERROR,
                  f"all {len(ranks)} ranks on {ctx.facts.host} wait in {call} at {file}:{line} for {ctx.facts.interval:.1f}+ s{where}",
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
    recs = _require_ranks(ctx)
    perm = [r["rank"] for r in recs if any(s.get("kind") == "permission" for s in r["samples"])]
    if perm:
        yield Finding(Severity.ERROR, f"py-spy may not read {_ranks(perm)}: no ptrace rights over the job's processes",
                      hint="root, CAP_SYS_PTRACE, or kernel.yama.ptrace_scope=0 for a process of your own user",
                      fix=Fix(PTRACE_FIX[0], commands=PTRACE_FIX[1]), evidence={"ranks": perm}, kind="ptrace")
    for r in recs:
        bad = [s for s in r["samples"] if not s.get("ok") and s.get("kind") not in ("permission", "gone")]
        if bad:
            yield Finding(Severity.WARNING, f"py-spy could not read rank {r['rank']} (pid {r['pid']}): {bad[0]['error']}",
                          evidence={"rank": r["rank"], "pid": r["pid"], "errors": [s["error"] for s in bad]}, kind="unreadable")


def nvml_records(ranks: Sequence[Mapping[str, Any]], snap: Mapping[str, Any]) -> dict[int, RankRecord]:
    """The smoke records (facts/smoke.py) from a running job: own GPU from LOCAL_RANK + CUDA_VISIBLE_DEVICES."""
    from ddpdoctor.facts.gpu import visible_gpu
    gpus = list(snap.get("gpus") or [])
    out = {}
    for r in ranks:
        if r.get("local_rank") is None:
            continue
        own = visible_gpu(r["local_rank"], r.get("env", {}).get("CUDA_VISIBLE_DEVICES"), gpus)
        out[r["rank"]] = RankRecord(r["rank"], r.get("host") or "?", r["pid"],
                                    gpu=GpuView(expected=own, snapshots={"after first collective": gpus}))
    return out


@check("DD410", "every rank's GPU memory is on its own GPU (running job)", category="gpu", tags={"inspect"}, timeout=2)
def running_rank_memory_on_own_gpu(ctx):
    """## What it checks
    NVML's compute processes per GPU, matched to the job's ranks by pid: each rank holds memory
    only on the GPU its LOCAL_RANK selects (through CUDA_VISIBLE_DEVICES), the judgement of DD401
    applied to a job ddpdoctor did not start.

    ## Why it matters
    A CUDA call before `torch.cuda.set_device(local_rank)` leaves a context and often tensors on
    GPU 0 in every process: GPU 0 runs out of memory while the others have room.

    ## Fix
    Call `torch.cuda.set_device(local_rank)` first thing, pass `device_id` to
    `init_process_group`, load checkpoints with `map_location` (`from ddpdoctor import setup_ddp;
    setup_ddp()` does all of it).
    """
    recs = _require_ranks(ctx)
    nodes = getattr(ctx.facts, "nodes", None) or []
    if nodes:  # --gather: each node's NVML judges that node's ranks (pids are per node)
        per = [(n["nvml"], [r for r in recs if _node(r) == n["node"]], n.get("pid_namespace_differs", False))
               for n in nodes if (n.get("nvml") or {}).get("available")]
        if not per:
            raise Skip("NVML unavailable on every node")
    else:
        snap = ctx.facts.nvml or {}
        if not snap.get("available"):
            raise Skip(f"NVML unavailable: {snap.get('error') or 'not read'}")
        per = [(snap, recs, ctx.facts.pid_namespace_differs)]
    for snap, nrecs, ns in per:
        yield from _memory_findings(snap, nrecs, ns)


def _memory_findings(snap, recs, pid_namespace_differs):
    ours = {r["pid"] for r in recs}
    seen = {p["pid"] for g in snap.get("gpus", []) for p in g.get("processes", [])}
    if pid_namespace_differs and seen and not seen & ours:
        yield Finding(Severity.WARNING,
                      "NVML reports pids of another pid namespace (a container): cannot map GPU memory to ranks here",
                      hint=f"NVML pids {sorted(seen)[:8]} match none of the job's pids {sorted(ours)[:8]}",
                      fix=Fix("run ddpdoctor inspect on the host, or in the job's container with --pid=host"),
                      evidence={"nvml_pids": sorted(seen), "rank_pids": sorted(ours)}, kind="pid-namespace")
        return
    for m in misplaced(nvml_records(recs, snap)):
        yield Finding(Severity.ERROR,
                      f"rank {m['rank']} (pid {m['pid']}) holds {mib(m['used'])} on GPU {m['gpu']}, its own GPU is {m['own_gpu']}",
                      hint="a CUDA call ran before torch.cuda.set_device(local_rank), or torch.load without map_location",
                      fix=Fix("bind each process to its own GPU before any CUDA call", code=SET_DEVICE_CODE),
                      evidence={k: m[k] for k in ("rank", "pid", "gpu", "uuid", "used", "own_gpu")}, kind="wrong-gpu")


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
    nodes = getattr(ctx.facts, "nodes", None) or []
    if not nodes:
        raise Skip("not a --gather run")
    for n in nodes:
        if not n.get("reported"):
            yield Finding(Severity.ERROR, f"{n['node']} did not report within the deadline: its ranks are unknown",
                          hint="its task did not start, could not reach the store on the first node, or overran",
                          fix=Fix(f"inspect it directly: ssh {n['node']} ddpdoctor inspect; or raise --deadline"),
                          evidence={"node": n["node"]}, kind="no-report")
        elif n.get("error"):
            yield Finding(Severity.ERROR, f"{n['node']}: {n['error']}",
                          hint="its ranks exited, or the step includes a node the job does not run on",
                          fix=Fix("read the launcher's output for the ranks that ran on it"),
                          evidence={"node": n["node"]}, kind="error")


def _pg(g: Mapping[str, Any]) -> str:
    return f"pg {g.get('pg')}" + (f" ({g['pg_desc']})" if g.get("pg_desc") else "")


@check("DD516", "the flight-recorder dumps show every rank in the same collective", category="distributed",
       tags={"inspect"}, timeout=2)
def flight_recorder_agrees(ctx):
    """## What it checks
    When the job left flight-recorder dumps (in the directory its ranks' `TORCH_FR_DUMP_TEMP_FILE`
    names, as `ddpdoctor arm` / `prolog --task` arrange, or `--fr DIR`), or, with `--debug-server`, in
    every rank's live buffer read from torch's debug server, every rank reached the same collective
    sequence number of each process group with the same op and sizes.

    ## Why it matters
    The dumps are written when the watchdog times out (NCCL): they record which collective each rank
    reached even when the stacks no longer show it (the ranks aborted, or wait in C++). A rank that
    never entered collective #N, or called another op at #N, is the origin of the hang.

    ## Fix
    Look at what the named rank did instead of collective #N: a rank-dependent branch, an early
    exit, uneven data (`DistributedSampler(drop_last=True)`). `ddpdoctor explain --fr DIR` shows the
    whole verdict.
    """
    fr = getattr(ctx.facts, "flightrec", None) or {}
    if not fr:
        raise Skip("the job is not armed (no TORCH_FR_DUMP_TEMP_FILE), and neither --fr DIR nor --debug-server was given")
    if fr.get("empty"):
        raise Skip(f"no dump in {fr['dir']} yet (torch writes them when a collective times out)")
    if fr.get("error"):
        if fr.get("dir", "").startswith("debug server"):
            yield Finding(Severity.WARNING, f"flight recorder: the {fr['dir']} gave nothing to read: {fr['error']}",
                          fix=Fix("call torch.distributed.debug.start_debug_server() in every rank after "
                                  "init_process_group, or arm the job for dumps", commands=("ddpdoctor arm",)),
                          evidence=fr, kind="empty")
            return
        yield Finding(Severity.WARNING, f"flight-recorder dumps in {fr['dir']} unreadable: {fr['error']}",
                      fix=Fix("check the dumps' owner and that they come from this job"), evidence=fr, kind="unreadable")
        return
    v = fr["verdict"]
    groups = v.get("groups") or []
    reached = {r: s for g in groups[:1] for r, s in (g.get("last_seq") or {}).items()}
    missing = v.get("missing") or []
    tail = f"; no dump from {_ranks([int(x) for x in missing])}" if missing else ""
    ev = {"dir": fr["dir"], "reached": reached, "missing": missing, "groups": groups[:3]}
    live = fr.get("source") == "debug server"
    where = f"live flight recorder from the {fr['dir']}" if live else f"dumps in {fr['dir']}"
    more = () if live else (f"ddpdoctor explain --fr {fr['dir']}",)
    for g in groups:
        st = g.get("status")
        at = f"collective #{g.get('seq')} ({g.get('op')}) of {_pg(g)}"
        if st == "diverged" and g.get("not_entered"):
            yield Finding(Severity.ERROR,
                          f"flight recorder: {_ranks(g['not_entered'])} never entered {at}; "
                          f"{_ranks(g.get('waiting') or [])} wait in it{tail}",
                          hint=where, fix=Fix(f"see what {_ranks(g['not_entered'])} did instead of {at}", commands=more),
                          evidence=ev, kind="never-entered")
        elif st == "mismatch":
            vs = sorted(g.get("variants") or [], key=lambda x: -len(x.get("ranks") or []))
            odd = "; ".join(f"{_ranks(x['ranks'])} called {x['op']}" for x in vs[1:])
            yield Finding(Severity.ERROR,
                          f"flight recorder: at {at} {odd} while {_ranks(vs[0]['ranks'])} called {vs[0]['op']}{tail}"
                          if vs else f"flight recorder: ranks called different collectives at {at}{tail}",
                          hint=where, fix=Fix("make every rank issue the same collectives in the same order", commands=more),
                          evidence=ev, kind="mismatch")
        elif st == "stuck":
            yield Finding(Severity.WARNING,
                          f"flight recorder: every dumped rank entered {at} and none completed it{tail}",
                          hint=g.get("note", ""), evidence=ev, kind="none-completed")
        else:
            continue
        return


@check("DD517", "the watchdog lines of the job's log show every rank in the same collective", category="distributed",
       tags={"inspect"}, timeout=2)
def watchdog_lines_agree(ctx):
    """## What it checks
    In the logs given with `--log`, the NCCL watchdog's per-rank lines (`last enqueued work: N, last
    completed work: M`) put every rank at the same collective of each process group.

    ## Why it matters
    When the watchdog times out it prints, per rank, how far each got. The ranks whose last enqueued
    collective is below the stuck one never entered it: they hold the others up, even if their stacks
    now look like everyone else's (aborting, or sitting in the same barrier later).

    ## Fix
    Look at what the named ranks did before the stuck collective (a rank-dependent branch, an early
    exit, uneven data). `ddpdoctor explain --log FILE` shows the whole verdict.
    """
    wd = getattr(ctx.facts, "watchdog", None) or {}
    if not wd:
        raise Skip("no --log given")
    groups = wd.get("groups") or []
    if not groups:
        raise Skip(f"no watchdog line in {', '.join(wd.get('logs') or [])}")
    g = groups[0]
    at = f"collective #{g.get('stuck_seq')}" + (f" ({g['op']})" if g.get("op") else "") + f" of {_pg(g)}"
    ev = {"logs": wd.get("logs"), "stuck_seq": g.get("stuck_seq"), "origin": g.get("origin"),
          "victims": g.get("victims"), "wavefront": g.get("wavefront")}
    if g.get("origin"):
        yield Finding(Severity.ERROR, f"watchdog: {_ranks(g['origin'])} never entered {at}; "
                                      f"{_ranks(g.get('victims') or [])} wait in it",
                      hint=f"from {', '.join(wd.get('logs') or [])}",
                      fix=Fix(f"see what {_ranks(g['origin'])} did before {at}"), evidence=ev, kind="never-entered")
    else:
        yield Finding(Severity.WARNING, f"watchdog: {at} timed out on {_ranks(g.get('victims') or [])}, "
                                        "every rank in the log had entered it",
                      hint=g.get("note", ""), evidence=ev, kind="timed-out")
