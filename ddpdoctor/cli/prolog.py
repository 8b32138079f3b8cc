"""`ddpdoctor prolog` (Slurm Prolog=) and `ddpdoctor prolog --task` (Slurm TaskProlog=).

Slurm drains a node and requeues the job whenever its Prolog exits non-zero, so the exit code is
the whole contract:

    0  the node is healthy, or ddpdoctor could not judge it (its own crash, a bad option or
       configuration, a check that overran): logged loudly, never a drain (exit 2/3 with --strict)
    1  a real node fault: one line `ddpdoctor: DDnnn <message>` per fault on stdout, the first one
       usable as the drain reason (`--drain` sets it with scontrol; Slurm itself says "Prolog error")

The prolog runs only node-local, bounded checks (those tagged "prolog"): no torch, no scontrol or
squeue while judging (slow Slurm calls inside health checks are how mass drains start), a global
deadline (5 s by default, Python's start-up included) and a watchdog behind it.
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Sequence

import click

from ddpdoctor.slurm.prolog import (CRASH_HOOK, EXIT_CRASH, EXIT_FAULT, EXIT_HEALTHY, EXIT_USAGE,  # noqa: F401
                                    Watchdog, crash_record, expand_path, judge, loud, process_age, scontrol_drain,
                                    write_report)
from ddpdoctor.cli.common import FINITE
from ddpdoctor.validate import BadInput

DEFAULT_DEADLINE = 5.0  # until the configuration is read (it may name another)
TASK_DEADLINE = 5.0     # prolog --task: Slurm waits for it before the task starts


def _json_error(msg: str, code: int, kind: str = "usage") -> None:
    """--json: a consumer parsing stdout gets a JSON document on error paths too."""
    from ddpdoctor.cli.common import write_stdout
    from ddpdoctor.render import json as rj
    write_stdout(rj.error("prolog", code, kind, msg) + "\n")


def _write_stderr(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


class _PrologCommand(click.Command):
    """A bad option must not drain the node: click's usage errors exit 0 here unless --strict."""

    def parse_args(self, ctx, args):
        strict = "--strict" in args and "--task" not in args
        json_wanted = "--json" in args and "--task" not in args  # click's parser consumes `args`
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            msg = e.format_message().replace("\n", " ")
            loud(f"ddpdoctor: error: prolog: {msg} (checks not run; node not failed{'' if strict else ', exit 0'})")
            code = EXIT_USAGE if strict else EXIT_HEALTHY
            if json_wanted:
                _json_error(msg, code)
            sys.exit(code)


@click.command("prolog", cls=_PrologCommand)
@click.option("--task", is_flag=True, help="TaskProlog mode: print `export` lines for GLOO/NCCL_SOCKET_IFNAME and `ddpdoctor arm`'s, nothing else.")
@click.option("--config", "config_path", metavar="FILE", help="Site configuration (TOML). Default: /etc/ddpdoctor.toml if it exists.")
@click.option("--deadline", type=FINITE, metavar="SECONDS", help="For everything, Python's start-up included. Default: 5 (prolog.deadline).")
@click.option("--drain", is_flag=True, help="On a node fault, also set the drain reason with scontrol (Slurm's own says 'Prolog error').")
@click.option("--strict", is_flag=True, help="Exit non-zero (drain) also when ddpdoctor crashes, is misconfigured or overruns.")
@click.option("--report-file", metavar="PATH", help="Write the JSON report there for audit (%n node name, %j job id).")
@click.option("--select", "select", multiple=True, metavar="PREFIX", help="Run only checks whose id starts with PREFIX (on top of the config).")
@click.option("--ignore", "ignore", multiple=True, metavar="PREFIX", help="Skip checks whose id starts with PREFIX (on top of the config).")
@click.option("--json", "json_out", is_flag=True, help="Print the JSON report on stdout (fault lines go to stderr).")
@click.option("-v", "--verbose", is_flag=True, help="Also print every check's result on stderr (for trying it by hand).")
def prolog(task, config_path, deadline, drain, strict, report_file, select, ignore, json_out, verbose):
    """Node health check for Slurm's Prolog= (exit 1 only for a real node fault).

    \b
    Prolog=/etc/slurm/prolog.d/ddpdoctor        (a script: exec ddpdoctor prolog --drain)
    TaskProlog=/etc/slurm/ddpdoctor-task        (a script: exec ddpdoctor prolog --task)

    Prints nothing on a healthy node. See docs/slurm.md for the slurm.conf lines and
    /etc/ddpdoctor.toml.
    """
    if task:
        # A failing TaskProlog fails the task: whatever hangs (the config on a dead mount), exit 0 in time.
        Watchdog(max(1.0, TASK_DEADLINE - process_age()), EXIT_HEALTHY,
                  lambda: loud("ddpdoctor: task prolog overran its deadline; nothing exported"))
        sys.exit(_task(config_path))
    strict_code = EXIT_CRASH if strict else EXIT_HEALTHY
    first = deadline if deadline is not None and math.isfinite(deadline) and 0.5 <= deadline <= 600 else DEFAULT_DEADLINE
    # at least 1 s for the config read itself: a site with a long prolog.deadline and a slow start is not cut short
    dog = Watchdog(max(1.0, first - process_age()) + 0.5, strict_code,
                    lambda: loud(f"ddpdoctor: the prolog overran its deadline of {first:g} s before the checks "
                                 "(reading the configuration or importing); not a node fault"))
    try:
        code = _prolog(config_path, deadline, drain, strict, report_file, select, ignore, json_out, verbose, dog)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - ddpdoctor's own failure must never drain a node
        loud(f"ddpdoctor: internal error, not a node fault (node not failed{'' if strict else ', exit 0'}): "
             f"{type(e).__name__}: {e}")
        if json_out:
            _json_error(f"{type(e).__name__}: {e}", EXIT_CRASH if strict else EXIT_HEALTHY, "crash")
        if report_file:
            write_report(expand_path(report_file, os.environ.get("SLURMD_NODENAME", ""), os.environ.get("SLURM_JOB_ID", "")),
                         crash_record(EXIT_CRASH if strict else EXIT_HEALTHY, e))
        code = EXIT_CRASH if strict else EXIT_HEALTHY
    sys.exit(code)


def _task(config_path: str | None) -> int:
    """Print only `export`/`print` lines; whatever happens, exit 0 (a failing TaskProlog fails the task)."""
    try:
        from ddpdoctor.siteconfig import load
        from ddpdoctor.slurm.taskprolog import arm_task_lines, task_lines
        cfg = load(config_path)
        lines = []
        for part in (lambda: task_lines(os.environ, variables=cfg.task_variables, timeout=min(cfg.probe_timeout, 2.0)),
                     lambda: arm_task_lines(os.environ, cfg)):  # one failing part leaves the other's lines
            try:
                lines += part()
            except Exception as e:  # noqa: BLE001
                _task_error(e)
    except Exception as e:  # noqa: BLE001
        _task_error(e)
        return 0
    if lines:
        from ddpdoctor.cli.common import write_stdout
        write_stdout("".join(line + "\n" for line in lines))
    return 0


def _task_error(e: BaseException) -> None:
    try:
        sys.stderr.write(f"ddpdoctor: task prolog: {type(e).__name__}: {e}\n")
    except OSError:
        pass


def _prolog(config_path, deadline, drain, strict, report_file, select: Sequence[str], ignore: Sequence[str],
            json_out: bool, verbose: bool, dog: Watchdog) -> int:
    from ddpdoctor.siteconfig import ConfigError, load
    from ddpdoctor.validate import validate_seconds

    try:
        cfg = load(config_path)
        if deadline is not None:
            validate_seconds(deadline, "--deadline", minimum=0.5, maximum=600)
    except (ConfigError, BadInput) as e:
        loud(f"ddpdoctor: error: {e} (checks not run; node not failed{'' if strict else ', exit 0'})")
        if json_out:
            _json_error(str(e), EXIT_USAGE if strict else EXIT_HEALTHY)
        return EXIT_USAGE if strict else EXIT_HEALTHY
    if os.environ.get(CRASH_HOOK) == "prolog":
        raise RuntimeError(f"crash requested by {CRASH_HOOK}=prolog (a test hook)")
    budget = (deadline or cfg.deadline) - process_age()
    drain = drain or cfg.drain
    report_file = report_file or cfg.report_file
    node = os.environ.get("SLURMD_NODENAME", "")
    job = os.environ.get("SLURM_JOB_ID", "")

    def on_deadline():
        loud(f"ddpdoctor: the prolog overran its deadline of {deadline or cfg.deadline:g} s outside the checks; "
             "not a node fault")

    dog.rearm(max(0.2, budget) + 0.5, EXIT_CRASH if strict else EXIT_HEALTHY, on_deadline)

    from ddpdoctor import registry, runner
    from ddpdoctor.facts.node import PrologFacts
    from ddpdoctor.slurm.prolog import build_report

    ctx = PrologFacts(config=cfg)
    checks = registry.select("prolog", select=(*cfg.select, *select), ignore=(*cfg.ignore, *ignore))
    t0 = time.monotonic()
    results = runner.run_checks(checks, ctx, deadline=max(0.1, budget - 0.1), silenced=cfg.silenced)
    verdict, results = judge(results, cfg, strict=strict)
    node = node or ctx.node_name
    drain_error = ""
    drained = False
    if verdict.faults and drain:
        drain_error = scontrol_drain(node, verdict.reason())
        drained = not drain_error
    report = build_report(ctx, cfg, verdict, results, node=node, job=job, drain=drain, drained=drained,
                          drain_error=drain_error, duration_s=time.monotonic() - t0)

    # Output can fail (stdout closed, the pipe gone, a full disk): the verdict is the exit code, whatever.
    from ddpdoctor.cli.common import write_stdout
    if verdict.fault_lines:
        if json_out:
            _write_stderr("".join(line + "\n" for line in verdict.fault_lines))
        else:
            write_stdout("".join(line + "\n" for line in verdict.fault_lines))
    for w in verdict.warnings:
        _write_stderr(f"ddpdoctor: warning: {w}\n")
    for t in verdict.timeouts:
        loud(f"ddpdoctor: {t}; not counted as a node fault (prolog.drain_on_timeout = false)")
    for c in verdict.crashes:
        loud(f"ddpdoctor: internal error in {c}; not a node fault")
    if drain_error:
        loud(f"ddpdoctor: could not set the drain reason: {drain_error} (Slurm drains the node with 'Prolog error')")
    if verbose:
        from ddpdoctor.render import text
        try:
            text.write(report, sys.stderr, verbose=True)
        except (OSError, ValueError):
            pass
    if json_out:
        from ddpdoctor.render import json as rj
        write_stdout(rj.render(report) + "\n")
    if report_file:
        err = write_report(expand_path(report_file, node, job), report.to_dict())
        if err:
            loud(f"ddpdoctor: could not write the report: {err}")
    dog.done.set()
    return verdict.exit_code
