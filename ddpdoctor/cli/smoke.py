"""`ddpdoctor smoke`: a torch.distributed smoke test run exactly the way training runs.

parse (the options, checked, as a SmokeConfig) -> run (ddpdoctor/smoke/run.py: the ranks, through their
supervisors) -> judge (ddpdoctor/smoke/report.py) -> render (cli/common.emit).

This module never imports torch (`ddpdoctor --help` must stay fast): torch lives in the worker
processes (ddpdoctor/smoke/worker.py) that the supervisor starts.
"""
from __future__ import annotations

import os
import sys

import click

from ddpdoctor.cli.common import FINITE, emit
from ddpdoctor.validate import BadInput, validate_seconds


@click.command("smoke")
@click.option("--nproc", type=click.IntRange(1, 512), metavar="N",
              help="Start N local ranks here (standalone). Default without a launcher: 2.")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto", show_default=True,
              help="auto: NCCL when every rank has a GPU, else Gloo.")
@click.option("--timeout", type=FINITE, default=30.0, show_default=True,
              help="Seconds a rank may spend in one phase before it is named as stuck.")
@click.option("--max-size", default="64M", show_default=True, metavar="SIZE",
              help="Largest message for correctness and bandwidth (e.g. 4K, 1M, 64M).")
@click.option("--quick", is_flag=True, help="One small size, correctness only.")
@click.option("--expect-busbw", type=FINITE, metavar="GB/s", help="Warn when the peak all_reduce bus bandwidth is lower.")
@click.option("--fix", is_flag=True,
              help="When a rank holds memory on another GPU, re-run with set_device/device_id/empty_cache and compare.")
@click.option("--preamble", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="A Python file every rank runs before init_process_group (your script's set-up code).")
@click.option("--json", "json_out", is_flag=True, help="Print only the JSON report on stdout (rank 0).")
@click.option("--select", "select", multiple=True, metavar="PREFIX", help="Run only checks whose id starts with PREFIX.")
@click.option("--ignore", "ignore", multiple=True, metavar="PREFIX", help="Skip checks whose id starts with PREFIX.")
@click.option("--fail-on", type=click.Choice(["error", "warning"], case_sensitive=False), default="error",
              show_default=True, help="Lowest severity that makes the exit code 1.")
@click.option("-v", "--verbose", is_flag=True, help="Informational findings in full; other ranks print a line each.")
def smoke(nproc, backend, timeout, max_size, quick, expect_busbw, fix, preamble, json_out, select, ignore,
          fail_on, verbose):
    """All-reduce/broadcast/barrier smoke test that names hung ranks and misplaced GPU memory.

    \b
    ddpdoctor smoke --nproc 2                             standalone: 2 local ranks
    torchrun --nnodes=2 --nproc-per-node=4 ... -m ddpdoctor smoke
    srun -N 2 --ntasks-per-node=4 ddpdoctor smoke         (or mpirun -x MASTER_ADDR=node1 ...)

    Rank 0 prints one report for the whole world; exit code 1 when a rank hangs, dies, or
    computes a wrong result.
    """
    from ddpdoctor import launch
    from ddpdoctor.smoke import run as smoke_run
    from ddpdoctor.smoke.report import report_of

    cfg = _config(timeout, max_size, quick, backend, expect_busbw, fix, preamble, verbose)
    rank_env = launch.detect(os.environ)
    if rank_env is not None and nproc is not None:
        raise BadInput(f"--nproc starts a local group of its own; under {rank_env.launcher} the launcher "
                       "starts the ranks: leave --nproc out")
    def say(line: str) -> None:
        click.echo(line, err=True)

    run = smoke_run.run(cfg, nproc or 2, rank_env, say=say)
    if run.interrupted:
        click.echo("ddpdoctor: interrupted", err=True)
        sys.exit(130)
    if run.exit_code is not None:  # a rank other than 0: rank 0 reports for the world
        sys.exit(run.exit_code)
    try:
        report = report_of(run, cfg, select=select, ignore=ignore, fail_on_warning=fail_on.lower() == "warning",
                           env=os.environ)
        emit(report, json_out=json_out, verbose=verbose)
    finally:  # the verdict is out: a stopped local rank would hold the launcher's 30 s SIGTERM grace
        smoke_run.after_report(run, say=say)


def _config(timeout, max_size, quick, backend, expect_busbw, fix, preamble, verbose):
    """The options, checked, as the SmokeConfig every rank is sent."""
    from ddpdoctor.smoke.plan import TORCH_INSTALL, SmokeConfig, parse_size
    from ddpdoctor.smoke.run import torch_missing

    missing = torch_missing()
    if missing:  # before starting ranks that would all die in their first line
        raise BadInput(f"torch is not installed for {sys.executable} ({missing}): {TORCH_INSTALL}")
    timeout = validate_seconds(timeout, "--timeout", minimum=1, maximum=3600)
    try:
        size = parse_size(max_size)
    except ValueError as e:
        raise BadInput(f"--max-size: {e}") from None
    if not 4 <= size <= 8 << 30:
        raise BadInput(f"--max-size {max_size}: want 4 bytes to 8G")
    if expect_busbw is not None and expect_busbw <= 0:
        raise BadInput(f"--expect-busbw {expect_busbw:g}: want a positive GB/s")
    return SmokeConfig(timeout=timeout, max_size=size, quick=quick, backend=backend, expect_busbw=expect_busbw,
                       fix=fix, preamble=os.path.abspath(preamble) if preamble else None, verbose=verbose)
