"""Options every check-running command shares, and how a finished report leaves the process."""
from __future__ import annotations

import functools
import math
import sys

import click

from ddpdoctor.model import Report
from ddpdoctor.streams import atomic_write, ensure_std_streams, stdout_gone, write_stdout  # noqa: F401 (re-exported)

_FAIL_ON = click.Choice(["error", "warning"], case_sensitive=False)


class FiniteFloat(click.FloatRange):
    """A float option that refuses nan and inf (click's FloatRange lets nan through every bound,
    and a NaN would end up in the JSON report, which JSON cannot hold)."""

    name = "float"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv

    def _describe_range(self) -> str:
        # click's help line shows the bounds; with none it would print `x<=None` (click/types.py)
        return "" if self.min is None and self.max is None else super()._describe_range()


FINITE = FiniteFloat()


def report_options(func):
    """--json, --select/--ignore (id prefixes), --fail-on, --deadline, --verbose."""
    @click.option("--json", "json_out", is_flag=True, help="Print only the JSON report on stdout.")
    @click.option("--select", "select", multiple=True, metavar="PREFIX", help="Run only checks whose id starts with PREFIX (repeatable).")
    @click.option("--ignore", "ignore", multiple=True, metavar="PREFIX", help="Skip checks whose id starts with PREFIX (repeatable).")
    @click.option("--fail-on", type=_FAIL_ON, default="error", show_default=True, help="Lowest severity that makes the exit code 1.")
    @click.option("--deadline", type=FiniteFloat(0.5, 3600), default=10.0, show_default=True,
                  help="Global deadline in seconds for all checks together.")
    @click.option("-v", "--verbose", is_flag=True, help="Show informational findings in full.")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


def emit(report: Report, *, json_out: bool, verbose: bool = False) -> None:
    """Render the report and exit with its code."""
    try:
        if json_out:
            from ddpdoctor.render import json as rj
            sys.stdout.write(rj.render(report) + "\n")
            sys.stdout.flush()
        else:
            from ddpdoctor.render import text
            text.write(report, sys.stdout, verbose=verbose)
            sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the verdict still decides the exit code
        stdout_gone()
    sys.exit(report.exit_code)
