"""`ddpdoctor arm`: print `export` lines that make the next hang of a job cheap to diagnose."""
from __future__ import annotations

import os
import sys

import click

from ddpdoctor.validate import BadInput


@click.command("arm")
@click.option("--dir", "root", metavar="DIR", help="Where per-job dump directories go (default $TMPDIR/ddpdoctor-fr-<uid>).")
@click.option("--entries", type=int, default=2000, show_default=True, help="Flight-recorder entries per process group.")
@click.option("--pg-timeout", type=float, metavar="MIN", help="Print advice for this process-group timeout (minutes).")
def arm(root, entries, pg_timeout):
    """Turn on torch's flight recorder with dumps on timeout into a per-job directory.

    \b
    eval "$(ddpdoctor arm)" && torchrun ... train.py

    Never overrides a variable already set. See docs/inspect.md ("Arm a job") for each variable.
    """
    if not 1 <= entries <= 1_000_000:
        raise BadInput(f"--entries {entries}: want 1 to 1000000")
    if pg_timeout is not None and not 0 < pg_timeout <= 1440:
        raise BadInput(f"--pg-timeout {pg_timeout:g}: want minutes in (0, 1440]")
    from ddpdoctor.inspect.arm import arm_lines
    sys.stdout.write("".join(l + "\n" for l in arm_lines(os.environ, root=root, entries=entries,
                                                          pg_timeout_min=pg_timeout)))
