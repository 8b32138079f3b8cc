"""`ddpdoctor run [--force] -- torchrun|srun|python ...`: pre-flight the launch, then exec it unchanged."""
from __future__ import annotations

import dataclasses
import sys

import click


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--force", is_flag=True, help="Launch even when the pre-flight finds errors (they are still printed).")
@click.option("--no-network", is_flag=True, help="Skip the network checks against the rendezvous endpoint.")
@click.option("--no-lint", is_flag=True, help="Skip linting the training script.")
@click.option("--dry-run", is_flag=True, help="Check only; print the verdict and exit without launching.")
@click.option("--select", "select", multiple=True, metavar="PREFIX", help="Only checks/rules whose id starts with PREFIX.")
@click.option("--ignore", "ignore", multiple=True, metavar="PREFIX", help="Skip checks/rules whose id starts with PREFIX.")
@click.option("--deadline", type=click.FloatRange(0.1, 60), default=2.0, show_default=True,
              help="Seconds the pre-flight checks may take together.")
@click.option("--json", "json_out", is_flag=True, help="With --dry-run (or a refusal): the report as JSON on stdout.")
@click.option("--watch", "watch", is_flag=True,
              help="Run `ddpdoctor watch` beside the launched job (its events on stderr); exit with the job's code.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND...")
def run(force, no_network, no_lint, dry_run, select, ignore, deadline, json_out, watch, command):
    """Check a torchrun/srun launch (arguments, script, rendezvous), then exec it unchanged.

    \b
    ddpdoctor run -- torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \\
        --rdzv-endpoint=node1:29400 --rdzv-id=$SLURM_JOB_ID train.py
    srun ddpdoctor run -- torchrun ... train.py     first word of the job step

    On errors it refuses (exit 1) and prints each finding with its fix; --force launches anyway.
    The launched command keeps its argv, environment, pid, signals and exit code (os.execvp).
    """
    from ddpdoctor.cli import fail_usage
    from ddpdoctor.runcmd import exec_command, preflight
    from ddpdoctor.runcmd.parse import NotALaunch

    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        fail_usage("run needs a command: ddpdoctor run -- torchrun ... train.py")
    try:
        pf = preflight(argv, network=not no_network, lint=not no_lint, deadline=deadline,
                       select=select, ignore=ignore)
    except NotALaunch as e:
        fail_usage(f"run: {e}")
    except FileNotFoundError as e:
        fail_usage(f"run: {e}")
    report = pf.report
    bad = report.exit_code != 0
    shown = dataclasses.replace(report, results=tuple(r for r in report.results
                                                       if r.status.value not in ("pass", "skip")))
    if json_out and (dry_run or (bad and not force)):
        from ddpdoctor.render import json as rj
        click.echo(rj.document({**report.to_dict(), "launched": False}))
    elif shown.results:
        from ddpdoctor.render import text
        text.write(shown, sys.stderr)
    from ddpdoctor.render.text import footer
    import shlex
    verdict = f"pre-flight: {footer(report)}"  # every outcome says so, the quiet all-well one included
    if dry_run:
        if not json_out:
            click.echo(f"ddpdoctor: {verdict}; {'would refuse to launch' if bad else 'would launch'}: "
                       f"{shlex.join(argv)}", err=True)
        sys.exit(report.exit_code)
    if bad and not force:
        click.echo(f"ddpdoctor: {verdict}; not launching (fix the errors above, or add --force to launch anyway)",
                   err=True)
        sys.exit(1)
    click.echo(f"ddpdoctor: {verdict}; launching {shlex.join(argv)}", err=True)
    sys.stderr.flush()
    sys.stdout.flush()
    if watch:
        from ddpdoctor.runcmd.watch import launch_and_watch
        try:
            sys.exit(launch_and_watch(argv))
        except OSError as e:
            fail_usage(f"run: cannot execute {argv[0]!r}: {e.strerror or e}")
    try:
        exec_command(argv)
    except OSError as e:
        fail_usage(f"run: cannot execute {argv[0]!r}: {e.strerror or e}")
