"""Options every check-running command shares, and how a finished report leaves the process."""
from __future__ import annotations

import functools
import math
import os
import sys

import click

from ddpdoctor.model import Report

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


FINITE = FiniteFloat()


def stdout_gone() -> None:
    """The reader of stdout went away (a closed pipe): send the rest nowhere, so that neither the
    next write nor the flush at exit fails again, and the exit code stays the verdict's."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def write_stdout(text: str) -> None:
    """Write and flush stdout; a reader that went away is not an error (see stdout_gone)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()
    except (OSError, ValueError):  # closed, or ENOSPC on a redirect: the exit code still tells
        pass


def atomic_write(path: str, text: str, mode: int = 0o644) -> str:
    """Write `text` to `path` atomically (readers never see half a file); '' or why it failed.

    ddpdoctor runs as root (the prolog) and may write into a world-writable directory: the
    temporary file is made by mkstemp in the target's directory (O_EXCL, never through a planted
    symlink), then renamed over `path` (rename replaces a symlink there, never follows it).
    """
    import tempfile
    directory = os.path.dirname(os.path.abspath(path))
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
        return ""
    except OSError as e:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return f"{path}: {e.strerror or e}"


def ensure_std_streams() -> None:
    """Started with stdout or stderr closed (`>&-`): Python sets sys.stdout to None and every write
    crashes. Put /dev/null there (it also keeps fd 1/2 from being reused by a socket we open)."""
    for fd, name, mode in ((1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is None:
            try:
                os.fstat(fd)
            except OSError:
                devnull = os.open(os.devnull, os.O_WRONLY)
                if devnull != fd:
                    os.dup2(devnull, fd)
                    os.close(devnull)
            try:
                setattr(sys, name, open(fd, mode, closefd=False, errors="replace"))
            except OSError:
                pass


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
