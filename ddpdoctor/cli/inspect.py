"""`ddpdoctor inspect`: where every rank of a running job is, and who holds GPU memory where.

Never imports torch: the job's processes are read from outside (/proc, py-spy, NVML).
"""
from __future__ import annotations

import dataclasses
import os
import time

import click

from ddpdoctor.cli.common import emit, report_options
from ddpdoctor.validate import BadInput, validate_seconds


@click.command("inspect")
@click.option("--pid", type=int, metavar="PID", help="Any process of the job (a rank, or torchrun above them).")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="Seconds between the two stack samples that tell stuck from progressing.")
@click.option("--dump-timeout", type=float, default=3.0, show_default=True, help="Seconds one py-spy dump may take.")
@click.option("--no-gpu", is_flag=True, help="Do not read GPU memory through NVML.")
@click.option("--gather", is_flag=True,
              help="Under srun, one task per node: the first node collects every node's view and judges the job.")
@click.option("--gather-port", type=click.IntRange(1, 65535), default=29403, show_default=True,
              help="With --gather: the TCP port the first node listens on for the other nodes' views.")
@click.option("--fr", "fr_dir", metavar="DIR",
              help="Flight-recorder dumps to read (default: the directory the ranks' TORCH_FR_DUMP_TEMP_FILE names).")
@click.option("--debug-server", is_flag=True,
              help="Read every rank's live flight recorder from torch's debug server (the job called "
                   "torch.distributed.debug.start_debug_server()), and its stacks where ptrace is denied. "
                   "No rank runs one: DD516 says so (a warning), the other checks stand.")
@click.option("--log", "logs", multiple=True, metavar="FILE",
              help="A log of the job (repeatable): combine its NCCL watchdog lines with the stacks.")
@report_options
def inspect_cmd(pid, interval, dump_timeout, no_gpu, gather, gather_port, fr_dir, debug_server, logs, json_out,
                select, ignore,
                fail_on, deadline, verbose):
    """Find the rank that holds a running job up: who waits in which collective at which line.

    \b
    ddpdoctor inspect                 the torch.distributed job on this node
    ddpdoctor inspect --pid 4121      the job this process belongs to
    srun --jobid <id> --overlap -N <n> --ntasks-per-node 1 ddpdoctor inspect --gather
                                      every node of a Slurm job, one verdict

    Only looks (py-spy --nonblocking, /proc, NVML): the job keeps running unchanged. Exit 1 when
    a rank is stuck, odd, gone or holds memory on another rank's GPU; 0 when the job makes progress.
    """
    interval = validate_seconds(interval, "--interval", minimum=0.1, maximum=60)
    dump_timeout = validate_seconds(dump_timeout, "--dump-timeout", minimum=0.2, maximum=60)
    if pid is not None and pid <= 0:
        raise BadInput(f"--pid {pid}: want a positive process id")
    if gather and pid is not None:
        raise BadInput("--pid names a process of one node; --gather finds the job on every node by itself")
    for path in logs:
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise BadInput(f"--log {path}: not a readable file")
    if fr_dir is not None and not os.path.isdir(fr_dir):
        raise BadInput(f"--fr {fr_dir}: not a directory")
    if interval + 2 * dump_timeout > deadline:
        dump_timeout = max(0.2, (deadline - interval) / 2)

    from ddpdoctor.inspect import sample
    from ddpdoctor.probes import pyspy

    if pyspy.binary() is None:
        raise BadInput("py-spy is not installed: pip install py-spy")
    t0 = time.monotonic()
    if gather:
        facts = _gather(pid, interval, dump_timeout, no_gpu, gather_port, deadline, t0, fr_dir)
    else:
        try:
            fallback = counters = None
            if debug_server:
                from ddpdoctor.inspect.debugserver import collective_counts as counters
                from ddpdoctor.inspect.debugserver import stack_dumps as fallback
            facts = sample.collect(pid, interval=interval, dump_timeout=dump_timeout, nvml=not no_gpu,
                                   fallback=fallback, counters=counters)
        except sample.NoJob as e:
            raise BadInput(str(e)) from None
    if facts.ranks and all(s.get("kind") == "permission" for r in facts.ranks for s in r["samples"]):
        # not one stack readable: the verdict would be empty, the fix is one line
        click.echo(f"ddpdoctor: error: {pyspy.PTRACE_HELP}", err=True)
        raise SystemExit(1)
    from ddpdoctor.inspect import armed
    if not facts.flightrec:  # --gather already judged every node's dumps together
        dirs = [fr_dir] if fr_dir else armed.dump_dirs(facts.ranks)
        facts.flightrec = _within_deadline(armed.flight_recorder, dirs, deadline=deadline, t0=t0,
                                           late={"dir": dirs[0] if dirs else "",
                                                 "error": f"reading the dumps overran inspect's deadline ({deadline:g} s)"})
    if debug_server and not facts.flightrec.get("verdict"):
        # dumps on disk win (they are what the job left); else the ranks' live buffers
        from ddpdoctor.inspect import debugserver
        facts.flightrec = debugserver.flight_recorder(facts.ranks, timeout=min(dump_timeout, 5.0))
    if logs:
        try:
            facts.watchdog = _within_deadline(armed.watchdog_lines, logs, deadline=deadline, t0=t0,
                                              late={"logs": list(logs), "error": "reading the logs overran "
                                                    f"inspect's deadline ({deadline:g} s)"})
        except OSError as e:
            raise BadInput(f"--log: {e.filename}: {e.strerror}") from None
    left = max(0.5, deadline - (time.monotonic() - t0))
    report = build_report(facts, deadline=left, select=select, ignore=ignore, fail_on_warning=fail_on == "warning",
                          gathered=gather)
    report = dataclasses.replace(report, duration_s=time.monotonic() - t0)
    emit(report, json_out=json_out, verbose=verbose)


def build_report(facts, *, deadline: float, select=(), ignore=(), fail_on_warning: bool = False,
                 gathered: bool = False):
    """The verdict on gathered facts: the inspect checks, and the facts the report carries in `extra`."""
    from ddpdoctor import registry, runner

    checks = registry.select("inspect", select=select, ignore=ignore)
    from ddpdoctor.facts.inspect import InspectContext
    return runner.run_report("inspect", facts.host, checks, InspectContext.from_facts(facts), deadline=deadline,
                             fail_on_warning=fail_on_warning,
                             extra={"job": facts.job, "ranks": facts.ranks, "other_jobs": facts.other_jobs,
                                    "interval_s": facts.interval, **({"nodes": facts.nodes} if gathered else {}),
                                    **({"flightrec": facts.flightrec} if facts.flightrec else {}),
                                    **({"watchdog": facts.watchdog} if facts.watchdog else {}),
                                    **({"jobs": facts.jobs, "chosen": facts.chosen} if facts.jobs else {})})


def _within_deadline(fn, arg, *, deadline: float, t0: float, late: dict):
    """fn(arg) in what is left of the deadline (0.5 s kept for the checks), in a forked child: dumps
    on a slow disk or a hung mount, or a directory of huge ones, must not hold the verdict past it.
    Not a thread: unpickling a dump holds the GIL for its whole C call, which starves the checks'
    threads (measured: a 4 s deadline became 10 s). `late` when it overruns; fn's OSError re-raised."""
    import multiprocessing
    mp = multiprocessing.get_context("fork")
    recv, send = mp.Pipe(duplex=False)
    child = mp.Process(target=_run_child, args=(send, fn, arg), daemon=True)
    child.start()
    send.close()
    try:
        if recv.poll(max(0.1, deadline - (time.monotonic() - t0) - 0.5)):
            kind, value = recv.recv()
            if kind == "error":
                raise value
            return value
        return late
    except EOFError:  # the child died (out of memory, a signal): no verdict from the dumps
        return {**late, "error": "reading them failed (the reader died)"}
    finally:
        recv.close()
        if child.is_alive():
            child.kill()
        child.join(2)


def _run_child(send, fn, arg) -> None:
    try:
        out = ("ok", fn(arg))
    except OSError as e:
        out = ("error", OSError(e.errno, e.strerror, e.filename))
    except Exception as e:  # noqa: BLE001 - a bug: said as one line by the parent's caller
        out = ("error", RuntimeError(f"{type(e).__name__}: {e}"))
    send.send(out)
    send.close()


def _gather(pid, interval, dump_timeout, no_gpu, gather_port, deadline, t0, fr_dir):
    """This node's part of --gather; returns the merged facts on the first node, exits elsewhere."""
    from ddpdoctor.inspect import gather, sample

    step = gather.detect_step(os.environ, port=gather_port)
    if not step.representative:
        raise SystemExit(0)  # another task on this node speaks for it

    def collect():
        from ddpdoctor.inspect import armed
        facts = sample.collect(pid, interval=interval, dump_timeout=dump_timeout, nvml=not no_gpu)
        facts.fr_dumps = armed.node_dumps([fr_dir] if fr_dir else armed.dump_dirs(facts.ranks))
        return facts
    try:  # 0.5 s of the deadline is left for the checks and the verdict on the first node
        views = gather.run(step, collect, deadline=max(1.0, deadline - 0.5), started=t0)
    except gather.GatherError as e:
        click.echo(f"ddpdoctor: error: {step.node}: {e}", err=True)
        raise SystemExit(1) from None
    if views is None:
        raise SystemExit(0)  # the first node prints the verdict for every node
    return gather.merge(step, views)
