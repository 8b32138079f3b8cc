"""Command line: parse, select checks, call the runner, render. Nothing else lives here.

Subcommands (declared in ddpdoctor/commands.py) are imported only when used (`LazyGroup`), so `ddpdoctor --help` and `ddpdoctor
network` never import torch. Exit codes: 0 nothing failed, 1 a failure or timeout, 2 usage or
configuration error, 3 ddpdoctor itself crashed.
"""
from __future__ import annotations

import os
import socket
import sys

import click

from ddpdoctor import __version__, commands
from ddpdoctor.commands import COMMANDS
from ddpdoctor.validate import BadInput

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_CRASH = 0, 1, 2, 3

class LazyGroup(click.Group):
    """The subcommands of ddpdoctor/commands.py, each imported only when it is asked for."""

    def list_commands(self, ctx):
        return [c.name for c in COMMANDS if self._load(c.name) is not None]

    def get_command(self, ctx, name):
        return self._load(name)

    @staticmethod
    def _load(name):
        command = commands.get(name)
        if command is None:
            return None
        try:
            return command.load_cli()
        except ModuleNotFoundError as e:
            mod = command.cli.partition(":")[0]
            if e.name and mod.startswith(e.name):  # that command is not part of this build
                return None
            raise


def _json_wanted(args) -> bool:
    return "--json" in (args or ())


def _subcommand(args) -> str:
    return next((a for a in args or () if not a.startswith("-")), "")


def fail_usage(msg: str, *, code: int = EXIT_USAGE, kind: str = "usage") -> None:
    """One clear line on stderr and exit 2: the contract for bad input. With --json, stdout also
    gets a JSON error object (a consumer parsing stdout must not get an empty document)."""
    args = sys.argv[1:]
    if _json_wanted(args):
        from ddpdoctor.cli.common import write_stdout
        from ddpdoctor.render import json as rj
        write_stdout(rj.error(_subcommand(args) or "ddpdoctor", code, kind, msg) + "\n")
    from ddpdoctor.render.safe import one_line
    click.echo(f"ddpdoctor: error: {one_line(msg)}", err=True)  # a path or a value may hold a newline or ESC
    sys.exit(code)


def default_master() -> str:
    return os.environ.get("MASTER_ADDR") or socket.gethostname()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="ddpdoctor")
def cli():
    """Find why a distributed PyTorch job will not start, hangs, or wastes GPU memory.

    \b
    ddpdoctor network --master node1          on a worker: DNS, ports, NIC choice, environment
    ddpdoctor network --listen --expect 3     on the master, while the workers probe it
    ddpdoctor explain DD303                   what a check verifies and how to fix it
    """


class Terminated(KeyboardInterrupt):
    """SIGTERM (srun on a time limit, timeout(1), a scheduler), raised where the process is, like
    Ctrl-C: the command's cleanup runs and --json still prints a JSON object instead of nothing."""


def _terminate_like_ctrl_c() -> None:
    import signal

    def on_term(signum, frame):
        raise Terminated()
    try:
        signal.signal(signal.SIGTERM, on_term)
    except (ValueError, OSError):  # not the main thread (an embedding caller): leave it
        pass


def main(argv=None) -> None:
    from ddpdoctor.cli.common import ensure_std_streams, stdout_gone

    ensure_std_streams()
    from ddpdoctor.streams import guard_stdout
    guard_stdout()  # a closed pipe no longer turns a verdict's exit code into 0
    _terminate_like_ctrl_c()
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is not None:
        sys.argv = [sys.argv[0], *args]  # fail_usage reads --json from there
    if not args:
        args = ["--help"]  # the normal help, not a one-line "error: Usage: ..."
    try:
        # Not cli.main(): it turns EOFError into "Aborted!" and a broken pipe into exit 1, both wrong here.
        with cli.make_context("ddpdoctor", args) as ctx:
            cli.invoke(ctx)
    except click.exceptions.Exit as e:  # --help, --version
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("ddpdoctor: interrupted", err=True)
        sys.exit(130)
    except EOFError as e:  # e.g. a truncated compressed file deep in a reader: bad input, not Ctrl-D
        fail_usage(f"unexpected end of input ({e})")
    except click.ClickException as e:
        # click's usage errors: keep them to one line, exit 2
        fail_usage(e.format_message().replace("\n", " "))
    except BadInput as e:
        fail_usage(str(e))
    except SystemExit:
        raise
    except KeyboardInterrupt as e:  # SIGINT, or SIGTERM (Terminated): with --json still a JSON object on stdout
        name = "SIGTERM" if isinstance(e, Terminated) else "SIGINT"
        fail_usage(f"interrupted by {name}", code=143 if name == "SIGTERM" else 130, kind="interrupted")
    except BrokenPipeError:  # `| head` went away: not an error of ours
        stdout_gone()
        sys.exit(EXIT_OK)
    except Exception as e:  # noqa: BLE001 - never a traceback for the user
        if os.environ.get("DDPDOCTOR_DEBUG"):
            raise
        fail_usage(f"internal error, please report: {type(e).__name__}: {e}", code=EXIT_CRASH, kind="crash")
    else:
        sys.exit(EXIT_OK)
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            stdout_gone()
