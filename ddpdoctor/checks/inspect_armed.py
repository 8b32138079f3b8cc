"""DD516, DD517: the job's own records of how far each rank got: flight-recorder dumps (or the debug server's
live buffers) and the NCCL watchdog's lines in its logs (facts/inspect.py FlightRecorderView, WatchdogView)."""
from __future__ import annotations

from ddpdoctor.facts.inspect import InspectContext
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check


def _ranks(rs) -> str:
    rs = sorted(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ",".join(map(str, rs))


@check("DD516", "the flight-recorder dumps show every rank in the same collective", category="distributed",
       tags={"inspect"}, timeout=2)
def flight_recorder_agrees(ctx: InspectContext):
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
    fr = ctx.flightrec
    if not fr.present:
        raise Skip("the job is not armed (no TORCH_FR_DUMP_TEMP_FILE), and neither --fr DIR nor --debug-server was given")
    if fr.empty:
        # torch's dump on timeout is the NCCL watchdog's (TORCH_NCCL_DUMP_ON_TIMEOUT); ProcessGroupGloo has none
        # (docs/flight-recorder.md): waiting for a dump of a Gloo job would wait forever
        raise Skip(f"no dump in {fr.dir} yet: NCCL jobs write one when a collective times out, Gloo jobs never "
                   "do; evidence for Gloo: the stacks (DD51x), `inspect --debug-server` (every rank's live "
                   "flight-recorder buffer), or the job's log after it fails (`ddpdoctor explain --log`)")
    if fr.error:
        if fr.dir.startswith("debug server"):
            yield Finding(Severity.WARNING, f"flight recorder: the {fr.dir} gave nothing to read: {fr.error}",
                          fix=Fix("add to every rank after init_process_group: `from torch.distributed.debug "
                                  "import start_debug_server; start_debug_server()` (torch >= 2.10; in torch 2.13 "
                                  "rank 0 also needs `pip install tabulate`), or arm the job for dumps",
                                  commands=("ddpdoctor arm",)),
                          evidence=dict(fr.raw), kind="empty")
            return
        yield Finding(Severity.WARNING, f"flight-recorder dumps in {fr.dir} unreadable: {fr.error}",
                      fix=Fix("check the dumps' owner and that they come from this job"), evidence=dict(fr.raw),
                      kind="unreadable")
        return
    reached = {r: s for g in fr.groups[:1] for r, s in g.last_seq.items()}
    tail = f"; no dump from {_ranks([int(x) for x in fr.missing])}" if fr.missing else ""
    ev = {"dir": fr.dir, "reached": reached, "missing": list(fr.missing), "groups": [g.raw for g in fr.groups[:3]]}
    live = fr.source == "debug server"
    where = f"live flight recorder from the {fr.dir}" if live else f"dumps in {fr.dir}"
    more = () if live else (f"ddpdoctor explain --fr {fr.dir}",)
    if live:
        # The live buffers are read one rank after another: in a job that runs hundreds of collectives a
        # second, rank 1 read a moment before rank 0 is one collective behind without being held up. A gap
        # in live buffers is a hang only for ranks that entered nothing between the two stack samples.
        moved = {r.rank: r.collectives for r in ctx.ranks}
        if any(g.status in ("diverged", "stuck") for g in fr.groups) and moved and all(moved.values()):
            raise Skip("the live buffers differ by what each rank ran while they were being read: every rank "
                       f"entered collectives between the samples ({', '.join(f'rank {r}: {n}' for r, n in sorted(moved.items()))})")
    for g in fr.groups:
        at = f"collective #{g.seq} ({g.op or None}) of {g.label}"
        if live and g.status == "diverged" and g.not_entered and any(moved.get(int(r)) for r in g.not_entered
                                                                    if str(r).lstrip("-").isdigit()):
            continue  # that rank moved between the samples: it is behind the snapshot, not stuck
        if g.status == "diverged" and g.not_entered:
            yield Finding(Severity.ERROR,
                          f"flight recorder: {_ranks(g.not_entered)} never entered {at}; "
                          f"{_ranks(g.waiting)} wait in it{tail}",
                          hint=where, fix=Fix(f"see what {_ranks(g.not_entered)} did instead of {at}", commands=more),
                          evidence=ev, kind="never-entered")
        elif g.status == "mismatch":
            vs = sorted(g.variants, key=lambda x: -len(x["ranks"]))
            odd = "; ".join(f"{_ranks(x['ranks'])} called {x['op']}" for x in vs[1:])
            yield Finding(Severity.ERROR,
                          f"flight recorder: at {at} {odd} while {_ranks(vs[0]['ranks'])} called {vs[0]['op']}{tail}"
                          if vs else f"flight recorder: ranks called different collectives at {at}{tail}",
                          hint=where, fix=Fix("make every rank issue the same collectives in the same order", commands=more),
                          evidence=ev, kind="mismatch")
        elif g.status == "stuck":
            yield Finding(Severity.WARNING,
                          f"flight recorder: every dumped rank entered {at} and none completed it{tail}",
                          hint=g.note, evidence=ev, kind="none-completed")
        else:
            continue
        return


@check("DD517", "the watchdog lines of the job's log show every rank in the same collective", category="distributed",
       tags={"inspect"}, timeout=2)
def watchdog_lines_agree(ctx: InspectContext):
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
    wd = ctx.watchdog
    if not wd.present:
        raise Skip("no --log given")
    if wd.error:  # the logs could not be read within the deadline: no verdict, not "no line"
        raise Skip(wd.error)
    if not wd.groups:
        raise Skip(f"no watchdog line in {', '.join(wd.logs)}")
    g = wd.groups[0]
    at = f"collective #{g.stuck_seq}" + (f" ({g.op})" if g.op else "") + f" of {g.label}"
    ev = {"logs": list(wd.logs), "stuck_seq": g.stuck_seq, "origin": list(g.origin), "victims": list(g.victims),
          "wavefront": g.wavefront}
    if g.origin:
        yield Finding(Severity.ERROR, f"watchdog: {_ranks(g.origin)} never entered {at}; "
                                      f"{_ranks(g.victims)} wait in it",
                      hint=f"from {', '.join(wd.logs)}",
                      fix=Fix(f"see what {_ranks(g.origin)} did before {at}"), evidence=ev,
                      kind="never-entered")
    else:
        yield Finding(Severity.WARNING, f"watchdog: {at} timed out on {_ranks(g.victims)}, "
                                        "every rank in the log had entered it",
                      hint=g.note, evidence=ev, kind="timed-out")
