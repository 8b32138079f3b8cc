"""DD5xx: torch.distributed as `ddpdoctor smoke` saw it on every rank.

Facts (ddpdoctor/facts/smoke.py) are the ranks' records (ddpdoctor/smoke/worker.py) and, when the run
stalled, the watchdog's verdict (ddpdoctor/smoke/progress.py): every rank's phase, heartbeat age, error and
exit. These checks turn them into findings that name ranks, hosts and phases.
"""
from __future__ import annotations

import dataclasses

from typing import Any, Iterable, Mapping, Sequence

from ddpdoctor.facts.smoke import CollectiveResult, RankState
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check
from ddpdoctor.checks import drift
from ddpdoctor.units import fmt_bytes, fmt_ranks
from ddpdoctor.facts import bandwidth as bw


def _hosts_of(ranks: Iterable[int], host_of: Mapping[int, str]) -> str:
    hosts = sorted({host_of.get(r, "?") for r in ranks})
    return ", ".join(hosts)


def _who(st: RankState) -> str:
    return f"rank {st.rank} (pid {st.pid}, {st.host})"


SILENT_S = 2.0  # heartbeats come every 0.25 s: this long without one means the process is not running


def culprits(states: Sequence[RankState]) -> list[RankState]:
    """The ranks that hold the others up, from every rank's state when the watchdog fired.

    A rank is a culprit when it never connected, died, is stopped or silent, sits in its own code
    while others wait in a collective for it, or (when no rank reported an error, which would
    make it skip ahead) is behind the others. The rest are waiting for them. States relayed
    from a rank 0 that froze are only context: they may be a moment old.
    """
    seen = [s for s in states if s.seen]
    furthest = max((s.index for s in seen), default=-1)
    any_error = any(s.error for s in seen)
    waiting = {s.rank for s in seen if s.in_collective}
    out = []
    for s in states:
        if s.relayed:
            continue  # as rank 0 saw it before it froze: context, not evidence
        if (not s.seen or s.exit or s.proc_state in ("stopped", "gone", "zombie")
                or s.silent_s > SILENT_S
                or (not s.in_collective and waiting - {s.rank} and s.phase not in ("report", "done")
                    and not s.error)
                or (not any_error and s.index < furthest)):
            out.append(s)
    return out


def _culprit_line(st: RankState) -> tuple[str, Fix | None]:
    """What is wrong with one rank that holds the others up, and what to do about it."""
    phase = st.phase or "?"
    ps = st.proc_state
    on = f"# on {st.host}"
    if not st.seen and ps == "stopped":
        # a process that exists but does not run is not a network problem
        return (f"{_who(st)} is stopped (SIGSTOP/SIGTSTP) before it reached the rendezvous store "
                f"(waited {st.waited_s:g} s)",
                Fix("resume it or end it; a stopped process holds the whole group",
                    commands=(f"kill -CONT {st.pid}   {on}",)))
    if not st.seen and ps in ("gone", "zombie"):
        return f"{_who(st)} exited before it reached the rendezvous store", Fix("read that rank's log")
    if not st.seen and ps == "sleeping":
        return (f"{_who(st)} is alive but sleeping and never reached the rendezvous store (waited {st.waited_s:g} s): "
                "blocked in its own start-up or in connecting to the store",
                Fix("see where it waits; if it is in connect(), check the network to the store",
                    commands=(f"py-spy dump --pid {st.pid}   {on}",
                              "ddpdoctor network --master $MASTER_ADDR --port $MASTER_PORT")))
    if not st.seen:
        return (f"rank {st.rank} never connected to the rendezvous store (waited {st.waited_s:g} s)",
                Fix("check that this rank was started and can reach MASTER_ADDR:MASTER_PORT",
                    commands=("ddpdoctor network --master $MASTER_ADDR --port $MASTER_PORT",)))
    if st.exit:
        if "SIGKILL" not in st.exit:  # an exit code is the rank's own doing: its log says why, not dmesg
            return (f"{_who(st)} {st.exit} in phase '{phase}'", Fix("read that rank's log (below)"))
        return (f"{_who(st)} {st.exit} in phase '{phase}' (SIGKILL without an error: often the kernel's OOM "
                "killer, see dmesg)",
                Fix("read that rank's log; for a SIGKILL look for the OOM killer",
                    commands=(f"ssh {st.host} dmesg -T | grep -i -E 'killed process|out of memory'",)))
    if ps == "stopped":
        return (f"{_who(st)} is stopped (SIGSTOP/SIGTSTP) in phase '{phase}': no heartbeat for {st.heartbeat_age_s} s",
                Fix("resume it or end it; a stopped process holds the whole group",
                    commands=(f"kill -CONT {st.pid}   {on}",)))
    if ps in ("gone", "zombie"):
        return (f"{_who(st)} is gone (exited or killed) in phase '{phase}'", None)
    if st.silent_s > SILENT_S:
        return (f"{_who(st)} stopped responding in phase '{phase}': no heartbeat for {st.heartbeat_age_s} s "
                "(stopped, killed, or frozen with the interpreter lock held)",
                Fix("look at the process on its host",
                    commands=(f"ssh {st.host} ps -o pid,stat,wchan:32,cmd -p {st.pid}",
                              f"py-spy dump --pid {st.pid}")))
    if not st.in_collective:
        return (f"{_who(st)} is alive but has not entered the collective of phase '{phase}' after "
                f"{st.in_phase_s} s: its own code is busy or stuck",
                Fix("see where it is", commands=(f"py-spy dump --pid {st.pid}   {on}",)))
    return (f"{_who(st)} is behind the others: still in phase '{phase}' after {st.in_phase_s} s",
            Fix("see where it waits", commands=(f"py-spy dump --pid {st.pid}   {on}",)))


@check("DD501", "every rank reached every phase", category="distributed", tags={"smoke"}, timeout=2, order=-1)
def every_rank_finished(ctx):
    """## What it checks
    Every rank records its phase (store connected, backend agreed, process group initialised,
    each collective, report) with host and pid in the rendezvous store, and a heartbeat. A rank
    that stays in one phase, or stops beating, for longer than `--timeout` is named with its host
    and phase; so is one that died or reported an error.

    ## Why it matters
    A stopped, dead or hung rank makes every other rank wait inside a collective: torch reports it
    after the process-group timeout (10 minutes by default, 30 in older releases), if at all, and
    then on the *waiting* ranks, not on the culprit.

    ## Fix
    Depends on the rank: resume a stopped process (`kill -CONT`), read the log of one that died
    (a SIGKILL is usually the OOM killer), run `py-spy dump` on one that hangs, and set
    `NCCL_DEBUG=INFO` when every rank hangs inside the same collective.
    """
    # every finding of a stalled run names the ranks holding the others up (the smoke table's header reads it)
    held = [s.rank for s in culprits(ctx.verdict.states)] if ctx.verdict else None
    for f in _phase_findings(ctx):
        yield f if held is None else dataclasses.replace(f, evidence={**f.evidence, "held_up_by": held})


def _phase_findings(ctx):
    verdict = ctx.verdict
    errors = [(r, rec.error) for r, rec in sorted(ctx.records.items()) if rec.error]
    failed = {r for r, _ in errors}
    failures = [Finding(Severity.ERROR, f"rank {r} (pid {ctx.records[r].pid}, {ctx.records[r].host}) "
                                        f"failed in phase '{err.phase}': {err.message}",
                        hint=err.hint, evidence={"rank": r, **err.to_dict()}, kind="rank-error") for r, err in errors]
    if verdict:
        states = verdict.states
        bad = culprits(states)
        bad_ranks = {s.rank for s in bad}
        waiting = [s for s in states if s.seen and s.rank not in bad_ranks]
        where = ""
        if waiting:
            ahead = max(waiting, key=lambda s: s.index)
            who = fmt_ranks(s.rank for s in waiting)
            where = (f"; rank {who} waits" if len(waiting) == 1 else f"; ranks {who} wait") + f" in phase '{ahead.phase}'"
        detected = f"detected by {verdict.detected_by} after {verdict.after_s} s (--timeout {verdict.timeout_s:g} s)"
        if verdict.kind == "terminated":
            yield Finding(Severity.ERROR, f"the run was ended from outside after {verdict.after_s} s, "
                                          f"{verdict.signal or 'by a signal'}",
                          hint="a launcher ending the job after another rank failed, a scheduler time limit, or kill; "
                               "the ranks' phases at that moment are in the table below",
                          evidence={"signal": verdict.signal}, kind="ended-outside")
        for st in states:  # a failure only the watchdog's states carry (the rank sent no record)
            if st.error and st.rank not in failed and not st.relayed:
                failures.append(Finding(Severity.ERROR, f"{_who(st)} failed in phase '{st.phase or '?'}': "
                                                        f"{st.error}", evidence={"rank": st.rank, "error": st.error},
                                        kind="rank-error"))
                failed.add(st.rank)
        # When a rank failed, the others wait for it: never "a transport problem".
        if not bad and not failed and verdict.kind != "terminated":
            phase = max(states, key=lambda s: s.in_phase_s or 0).phase
            yield Finding(Severity.ERROR,
                          f"all {len(states)} ranks are alive and inside the collective of phase '{phase}', "
                          f"which does not complete",
                          hint=f"{detected}. A transport problem (a firewall on the ranks' ephemeral ports, the wrong "
                               "NIC, NCCL P2P/SHM) rather than one bad rank",
                          fix=Fix("see what the transport does, and check the network between the hosts",
                                  commands=("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET ddpdoctor smoke ...",
                                            "ddpdoctor network --master $MASTER_ADDR"),
                                  env={"NCCL_DEBUG": "INFO"}),
                          evidence=verdict.raw, kind="collective-hang")
        reported = {r for r, _ in errors}  # a rank that reported its own error is named by it, not twice
        for st in sorted((s for s in bad if s.rank not in reported), key=lambda s: (s.index, s.rank)):
            msg, fix = _culprit_line(st)
            extra = f"; ended by ddpdoctor: {st.ended_by_ddpdoctor}" if st.ended_by_ddpdoctor else ""
            if st.relayed:
                extra += "; as rank 0 last saw it"
            yield Finding(Severity.ERROR, msg, hint=detected + where + extra, fix=fix, evidence=st.raw, kind="hang")
    yield from failures
    if verdict or errors:
        return
    if not ctx.records:
        raise Skip("no rank reported results")
    missing = [r for r in range(ctx.world_size) if r not in ctx.records]
    if missing:
        yield Finding(Severity.ERROR, f"ranks {fmt_ranks(missing)} sent no results", evidence={"missing": missing}, kind="missing")
        return
    init = max(rec.phases.get("init", 0.0) for rec in ctx.records.values())
    yield Finding(Severity.INFO, f"{ctx.world_size} rank(s) on {len({r.host for r in ctx.records.values()})} "
                                 f"host(s) finished every phase; init_process_group took {init:.3f} s",
                  evidence={"world_size": ctx.world_size}, kind="ok")


def _all_reduce_cause(got: float, expected: float, world: int, ones: bool) -> str:
    diff = got - expected
    contributions = {r: (1 if ones else r + 1) for r in range(world)}
    missing = [r for r, c in contributions.items() if -diff == c]
    twice = [r for r, c in contributions.items() if diff == c]
    if missing and not ones:
        return f"as if rank {missing[0]}'s contribution ({contributions[missing[0]]}) were missing"
    if twice and not ones:
        return f"as if rank {twice[0]}'s contribution ({contributions[twice[0]]}) were counted twice"
    if ones and diff == int(diff) and diff:
        return f"as if {abs(int(diff))} contribution(s) were {'missing' if diff < 0 else 'extra'}"
    return "not a whole rank's contribution: data corrupted in transit"


@check("DD502", "collectives return the right values", category="distributed", tags={"smoke"}, timeout=2)
def collectives_correct(ctx):
    """## What it checks
    all_reduce (sum), broadcast and barrier over sizes from 4 bytes to `--max-size` and dtypes
    float32, int64 (and bfloat16 with NCCL). Rank r contributes r+1, so the sum is n(n+1)/2 and
    a missing or doubled rank shows as a difference of exactly its value; broadcast sources move
    from rank to rank. Results are compared exactly, and the first wrong element is reported.

    ## Why it matters
    A collective that returns wrong values trains a wrong model without any error: a faulty
    NIC or GPU, a transport bug at one message size, ranks with different NCCL versions.

    ## Fix
    Find the layer: compare versions (DD504), try `NCCL_PROTO=Simple` or `NCCL_ALGO=Ring` to
    isolate a protocol, run nccl-tests with `-c 1` at the failing size, and check the hosts'
    hardware logs (ECC, PCIe errors).
    """
    if not ctx.records or not any(rec.correctness for rec in ctx.records.values()):
        raise Skip("no collective completed")
    fails: dict[tuple, list[tuple[int, CollectiveResult]]] = {}
    total = 0
    for r, rec in sorted(ctx.records.items()):
        for e in rec.correctness:
            total += 1
            if not e.ok:
                fails.setdefault((e.op, e.dtype, e.size, e.src), []).append((r, e))
    for (op, dtype, size, src), entries in fails.items():
        r0, e0 = entries[0]
        bad = e0.first_bad
        what = f"{op} {dtype} {fmt_bytes(size)}" + (f" from rank {src}" if op == "broadcast" else "")
        if op == "all_reduce":
            cause = _all_reduce_cause(0 if bad.got is None else bad.got, 0 if bad.expected is None else bad.expected,
                                      ctx.world_size, e0.ones)
        elif op == "broadcast":
            cause = ("the data never arrived (still the receiver's initial zeros)" if bad.got == 0
                     else f"not the value rank {src} sent")
        else:
            cause = e0.error
        yield Finding(Severity.ERROR,
                      f"{what}: element {bad.index} is {bad.got}, expected {bad.expected} "
                      f"on ranks {fmt_ranks(r for r, _ in entries)} — {cause}",
                      hint=f"{len(entries)} rank(s) got wrong values; the element shown is rank {r0}'s first wrong one",
                      fix=Fix("isolate the layer that corrupts data",
                              commands=("NCCL_PROTO=Simple ddpdoctor smoke ...", "NCCL_ALGO=Ring ddpdoctor smoke ...",
                                        f"all_reduce_perf -b {size} -e {size} -c 1   # nccl-tests, data check on")),
                      evidence={"op": op, "dtype": dtype, "size": size, "src": src,
                                "ranks": [r for r, _ in entries], "first_bad": bad.raw})
    if not fails:
        yield Finding(Severity.INFO, f"{total} collective results compared exactly, all correct", kind="ok")


@check("DD503", "all_reduce bus bandwidth", category="distributed", tags={"smoke"}, timeout=2)
def allreduce_bandwidth(ctx):
    """## What it checks
    all_reduce time per size after warm-up, median over iterations, the slowest rank's median;
    algbw = bytes / time and busbw = algbw * 2(n-1)/n, as nccl-tests define them. With
    `--expect-busbw GB/s`, a peak bus bandwidth below it is a warning.

    ## Why it matters
    A job that works but runs over the wrong path (TCP instead of InfiniBand, a 1 GbE management
    NIC, P2P disabled) is only visible as bandwidth: a fraction of what the hardware can do.

    ## Fix
    Compare with the link speed; look at which transport NCCL picked (`NCCL_DEBUG=INFO`,
    `NCCL_DEBUG_SUBSYS=INIT,NET`) and which interface (DD3xx checks of `ddpdoctor network`).
    """
    per_rank = {r: list(rec.bandwidth) for r, rec in ctx.records.items() if rec.bandwidth}
    if not per_rank:
        raise Skip("no bandwidth measured" + (" (--quick)" if ctx.cfg.quick else ""))
    if ctx.world_size < 2:
        # one rank's all_reduce copies nothing anywhere: its "algbw" is a memory copy (or a no-op),
        # and busbw is 0 by definition. No number is better than a bogus one.
        raise Skip("bandwidth needs two or more ranks (with one rank all_reduce moves no data)")
    rows = bw.world_rows(per_rank, ctx.world_size)
    peak = max(rows, key=lambda row: row["busbw_gbps"])
    desc = (f"peak busbw {peak['busbw_gbps']:.2f} GB/s (algbw {peak['algbw_gbps']:.2f} GB/s) at {fmt_bytes(peak['size'])}, "
            f"{ctx.world_size} ranks, {ctx.backend}")
    expect = ctx.cfg.expect_busbw
    if expect is None:
        yield Finding(Severity.INFO, desc, evidence={"rows": rows}, kind="ok")
        return
    if peak["busbw_gbps"] < expect:
        yield Finding(Severity.WARNING, f"{desc}: below the expected {expect:g} GB/s",
                      hint=f"slowest rank at that size: {peak['slowest_rank']}",
                      fix=Fix("see which transport and interface NCCL uses",
                              commands=("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET ddpdoctor smoke ...",
                                        "ddpdoctor network --master $MASTER_ADDR")),
                      evidence={"rows": rows, "expect_busbw": expect}, kind="slow")
    else:
        yield Finding(Severity.INFO, f"{desc} (expected at least {expect:g})", evidence={"rows": rows}, kind="ok")


def _grouped(values: Mapping[int, Any], host_of: Mapping[int, str]) -> str:
    by: dict[str, list[int]] = {}
    for r, v in values.items():
        by.setdefault("unset" if v is None else repr(v) if isinstance(v, str) else str(v), []).append(r)
    return "; ".join(f"{v} on ranks {fmt_ranks(rs)} ({_hosts_of(rs, host_of)})"
                     for v, rs in sorted(by.items(), key=lambda kv: kv[1][0]))


@check("DD504", "versions agree across ranks", category="distributed", tags={"smoke"}, timeout=2)
def versions_agree(ctx):
    """## What it checks
    torch, CUDA (torch's build), NCCL, the NVIDIA driver and Python, as every rank sees them.

    ## Why it matters
    Nodes built from different images mix versions: NCCL versions that disagree fail with
    confusing errors (`address family 0`, invalid usage) or hang in init; different torch
    releases change collectives' defaults. The same rule as DD716 (ddpdoctor/checks/drift.py):
    torch, NCCL or CUDA differing is an error; the driver or Python differing is a warning.

    ## Fix
    Install the same versions on every node (one container image, one environment).
    """
    if not ctx.records:
        raise Skip("no rank reported results")
    host_of = {r: rec.host for r, rec in ctx.records.items()}
    for key in drift.VERSION_KEYS:
        values = {r: rec.versions.get(key) for r, rec in ctx.records.items()}
        if len(set(values.values())) > 1:
            yield drift.finding(key, "ranks", _grouped(values, host_of), {"values": values})


PER_RANK_SETTINGS = frozenset({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "NCCL_DEBUG_FILE"})  # hold a per-rank path


@check("DD505", "NCCL/Gloo/torch settings agree across ranks", category="distributed", tags={"smoke"}, timeout=2)
def settings_agree(ctx):
    """## What it checks
    The `NCCL_*`, `GLOO_*` and `TORCH_*` variables every rank runs with (per-rank file paths
    aside) are the same on every rank.

    ## Why it matters
    A variable exported in one node's shell profile but not another's (`NCCL_IB_DISABLE=1`,
    `NCCL_SOCKET_IFNAME`, `TORCH_NCCL_BLOCKING_WAIT`) makes ranks take different transports or
    time-outs: hangs or crashes that appear only in multi-node runs.

    ## Fix
    Set these variables in the job script (or Slurm's `--export`) so that every rank gets them,
    not in per-node shell profiles.
    """
    if not ctx.records:
        raise Skip("no rank reported results")
    host_of = {r: rec.host for r, rec in ctx.records.items()}
    keys = sorted({k for rec in ctx.records.values() for k in rec.settings})
    for key in keys:
        if key in PER_RANK_SETTINGS or key == "CUDA_VISIBLE_DEVICES":
            continue  # legitimately per rank (srun --gpus-per-task binds one GPU per task)
        values = {r: rec.settings.get(key) for r, rec in ctx.records.items()}
        if len(set(values.values())) > 1:
            common = max(set(values.values()), key=lambda v: list(values.values()).count(v))
            yield Finding(Severity.WARNING, f"{key} differs across ranks: {_grouped(values, host_of)}",
                          fix=Fix(f"export one value of {key} for the whole job, in the job script",
                                  env={key: common} if common is not None else {}),
                          evidence={"key": key, "values": values})


@check("DD506", "a Gloo group works next to NCCL", category="distributed", tags={"smoke"}, timeout=2)
def gloo_next_to_nccl(ctx):
    """## What it checks
    With the NCCL backend, a Gloo group on CPU tensors is created and all-reduces correctly too.

    ## Why it matters
    CPU-side collectives (`all_gather_object`, `broadcast_object_list` of a non-CUDA tensor,
    monitored barriers, some checkpointing code) use Gloo even in NCCL jobs; a Gloo that cannot
    connect (wrong `GLOO_SOCKET_IFNAME`, the hostname resolving to loopback) fails them.

    ## Fix
    Point Gloo at the interface NCCL uses: `GLOO_SOCKET_IFNAME=<nic>` (plain names, no `^`);
    `ddpdoctor network` recommends one.
    """
    if ctx.backend != "nccl":
        raise Skip(f"backend is {ctx.backend or 'unknown'}: every collective already ran on it")
    for r, rec in sorted(ctx.records.items()):
        g = rec.gloo_cpu
        if g is not None and not g.ok:
            yield Finding(Severity.ERROR, f"rank {r} ({rec.host}): Gloo all_reduce next to NCCL failed: "
                                          f"{g.error or 'wrong result'}",
                          fix=Fix("make Gloo use the interface that reaches the other hosts",
                                  commands=("ddpdoctor network --master $MASTER_ADDR",)),
                          evidence={"rank": r, **g.raw})


@check("DD507", "the backend fits every rank", category="distributed", tags={"smoke"}, timeout=2)
def backend_fits(ctx):
    """## What it checks
    Which backend the ranks agreed on (`--backend auto`: NCCL when every rank has a GPU, else
    Gloo), and whether some ranks have a usable GPU while others do not.

    ## Why it matters
    An NCCL job fails on the first rank without a GPU (or without one for its local rank); a
    mixed group silently falls back to Gloo here, but your training script will ask for NCCL.

    ## Fix
    Make every node expose as many GPUs as processes it starts: driver loaded, CUDA build of
    torch, `CUDA_VISIBLE_DEVICES` listing them; or run on CPU with `--backend gloo`.
    """
    if not ctx.records:
        raise Skip("no rank reported results")
    with_gpu = [r for r, rec in ctx.records.items() if rec.has_gpu]
    without = [r for r, rec in ctx.records.items() if not rec.has_gpu]
    host_of = {r: rec.host for r, rec in ctx.records.items()}
    if with_gpu and without:
        sev = Severity.ERROR if ctx.cfg.backend == "nccl" else Severity.WARNING
        yield Finding(sev, f"ranks {fmt_ranks(without)} ({_hosts_of(without, host_of)}) have no usable GPU, "
                           f"ranks {fmt_ranks(with_gpu)} do" + ("" if sev is Severity.ERROR else ": the group fell back to Gloo"),
                      hint="a CPU-only torch build, CUDA_VISIBLE_DEVICES empty, or more processes than GPUs on those hosts",
                      fix=Fix("check the GPUs torch sees on those hosts",
                              commands=("python -c 'import torch; print(torch.cuda.is_available(), torch.cuda.device_count())'",)),
                      evidence={"with_gpu": with_gpu, "without_gpu": without}, kind="no-gpu")
    elif ctx.cfg.backend == "nccl" and without:
        yield Finding(Severity.ERROR, "--backend nccl, but no rank has a usable GPU",
                      fix=Fix("run on GPU hosts with a CUDA build of torch, or use --backend gloo"), kind="no-gpu")
    else:
        why = {"auto": "every rank has a GPU" if ctx.backend == "nccl" else "no rank has a usable GPU"}.get(
            ctx.cfg.backend, f"--backend {ctx.cfg.backend}")
        yield Finding(Severity.INFO, f"backend {ctx.backend}: {why}", kind="ok")
