"""Options every check-running command shares, and how a finished report leaves the process."""
from __future__ import annotations

import functools
import sys

import click

from ddpdoctor.model import Report

_FAIL_ON = click.Choice(["error", "warning"], case_sensitive=False)


def report_options(func):
    """--json, --select/--ignore (id prefixes), --fail-on, --deadline, --verbose."""
    @click.option("--json", "json_out", is_flag=True, help="Print only the JSON report on stdout.")
    @click.option("--select", "select", multiple=True, metavar="PREFIX", help="Run only checks whose id starts with PREFIX (repeatable).")
    @click.option("--ignore", "ignore", multiple=True, metavar="PREFIX", help="Skip checks whose id starts with PREFIX (repeatable).")
    @click.option("--fail-on", type=_FAIL_ON, default="error", show_default=True, help="Lowest severity that makes the exit code 1.")
    @click.option("--deadline", type=click.FloatRange(0.5, 3600), default=10.0, show_default=True,
                  help="Global deadline in seconds for all checks together.")
    @click.option("-v", "--verbose", is_flag=True, help="Show informational findings in full.")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


def emit(report: Report, *, json_out: bool, verbose: bool = False) -> None:
    """Render the report and exit with its code."""
    if json_out:
        from ddpdoctor.render import json as rj
        sys.stdout.write(rj.render(report) + "\n")
        sys.stdout.flush()
    else:
        from ddpdoctor.render import text
        text.write(report, sys.stdout, verbose=verbose)
    sys.exit(report.exit_code)
