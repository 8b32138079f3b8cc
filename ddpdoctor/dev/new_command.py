"""`python -m ddpdoctor.dev new-command NAME [--no-checks]`: a subcommand in four files.

Adds its `Command(...)` to ddpdoctor/commands.py (the one place a command is named) and writes
ddpdoctor/cli/<name>.py (parse -> gather -> select -> run -> render), ddpdoctor/facts/<name>.py (the typed
context its checks read; not with --no-checks) and tests/test_command_<name>.py. Checks join it with
`new-check ... --tags NAME`. The steps: docs/writing-a-command.md.
"""
from __future__ import annotations

import builtins
import keyword
import re
from pathlib import Path

from ddpdoctor.dev.ids import Refused

ROOT = Path(__file__).resolve().parents[2]
COMMANDS_FILE = ROOT / "ddpdoctor" / "commands.py"

CLI_TEMPLATE = '''"""`ddpdoctor {name}`: TODO what it finds, in one line."""
from __future__ import annotations

import click

from ddpdoctor.cli.common import emit, report_options


@click.command("{name}")
@report_options
def {func}(json_out, select, ignore, fail_on, deadline, verbose):
    """TODO: what this command finds, in one line (the first line is its --help summary)."""
    from ddpdoctor import registry, runner
    from ddpdoctor.facts.{module} import {ctx_class}

    ctx = {ctx_class}.gather()
    checks = registry.select("{name}", select=select, ignore=ignore)
    report = runner.run_report("{name}", ctx.hostname, checks, ctx, deadline=deadline,
                               fail_on_warning=fail_on == "warning")
    emit(report, json_out=json_out, verbose=verbose)
'''

CLI_NO_CHECKS_TEMPLATE = '''"""`ddpdoctor {name}`: TODO what it does, in one line."""
from __future__ import annotations

import click


@click.command("{name}")
@click.option("--json", "json_out", is_flag=True, help="Print only JSON on stdout.")
def {func}(json_out):
    """TODO: what this command does, in one line (the first line is its --help summary)."""
    from ddpdoctor.cli.common import write_stdout
    from ddpdoctor.render import json as rj

    if json_out:  # JSON only through render/json
        write_stdout(rj.document({{"schema": rj.SCHEMA_VERSION, "command": "{name}"}}) + "\\n")
    else:
        click.echo("TODO: what it found")
'''

FACTS_TEMPLATE = '''"""The facts `ddpdoctor {name}` judges, gathered once: TODO what they describe."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field


@dataclass
class {ctx_class}:
    """The context every check tagged "{name}" reads (ddpdoctor/commands.py names this class)."""

    hostname: str
    env: dict[str, str] = field(default_factory=dict)
    # TODO: the facts its checks judge, as typed fields; a probe with a timeout in probes/ reads each

    @classmethod
    def gather(cls) -> "{ctx_class}":
        return cls(hostname=socket.gethostname(), env=dict(os.environ))
'''

TEST_TEMPLATE = '''"""`ddpdoctor {name}` end to end: a real process, its exit code and its JSON report."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchjob  # a real process on this machine, not a unit test (tests/conftest.py)
ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    env = {{**os.environ, "PYTHONPATH": str(ROOT)}}
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "{name}", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_{slug}_reports_in_json():
    p = run("--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["command"] == "{name}"
    # TODO: run it on facts that show what it finds, and assert on the finding ids (DDnnn.kind)


def test_{slug}_is_listed_in_help():
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "--help"], capture_output=True, text=True, timeout=60,
                       env={{**os.environ, "PYTHONPATH": str(ROOT)}})
    assert ["{name}"] in [line.split()[:1] for line in p.stdout.splitlines()]
'''


def _insert_command(text: str, line: str) -> str:
    """commands.py with `line` as the last entry of COMMANDS (its place in --help)."""
    m = re.search(r"^COMMANDS: tuple\[Command, \.\.\.\] = \((.*?)^\)", text, re.S | re.M)
    if not m:
        raise Refused(f"{COMMANDS_FILE}: no `COMMANDS: tuple[Command, ...] = (...)` to add to")
    return text[:m.end(1)] + f"    {line}\n" + text[m.end(1):]


def new_command(name: str, *, checks: bool = True) -> list[Path]:
    from ddpdoctor import commands
    if not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name):
        raise Refused(f"bad command name {name!r}: lowercase words joined by '-', e.g. gpu-burn")
    if commands.get(name):
        raise Refused(f"command {name!r} exists already (ddpdoctor/commands.py)")
    module = name.replace("-", "_")
    # the click function must not shadow a builtin or a module it imports (`vars`, `inspect`)
    func = module + "_cmd" if module in dir(builtins) or keyword.iskeyword(module) or module in {"inspect", "click"} \
        else module
    ctx_class = "".join(w.capitalize() for w in name.split("-")) + "Context"
    cli = ROOT / "ddpdoctor" / "cli" / f"{module}.py"
    facts = ROOT / "ddpdoctor" / "facts" / f"{module}.py"
    test = ROOT / "tests" / f"test_command_{module}.py"
    for p in (cli, facts, test) if checks else (cli, test):
        if p.exists():
            raise Refused(f"{p.relative_to(ROOT)} exists already")
    if checks:
        decl = (f'Command("{name}", "ddpdoctor.cli.{module}:{func}", "ddpdoctor.facts.{module}:{ctx_class}"),')
        cli.write_text(CLI_TEMPLATE.format(name=name, func=func, module=module, ctx_class=ctx_class), encoding="utf-8")
        facts.write_text(FACTS_TEMPLATE.format(name=name, ctx_class=ctx_class), encoding="utf-8")
    else:
        decl = f'Command("{name}", "ddpdoctor.cli.{module}:{func}"),'
        cli.write_text(CLI_NO_CHECKS_TEMPLATE.format(name=name, func=func), encoding="utf-8")
    test.write_text(TEST_TEMPLATE.format(name=name, slug=module), encoding="utf-8")
    COMMANDS_FILE.write_text(_insert_command(COMMANDS_FILE.read_text(encoding="utf-8"), decl), encoding="utf-8")
    return [COMMANDS_FILE, cli, *([facts] if checks else []), test]
