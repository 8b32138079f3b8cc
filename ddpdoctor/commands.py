"""Every subcommand, declared once: its name, where its click command lives, the typed context its
checks read, and the renderer of its own text section.

This is the one place a new subcommand is named (docs/writing-a-command.md; `python -m ddpdoctor.dev new-command NAME` adds it). Everything that used to
be a table keyed by a command's name is derived from `COMMANDS`: the lazy subcommand loader
(cli/__init__.py), the tags a check may carry (registry.py), the command-specific text section
(render/text.py). Every reference is a "module:attribute" string, resolved only when that command
runs, so `ddpdoctor --help` and `ddpdoctor network` import neither torch nor another command's modules.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One subcommand.

    name          what the user types (`ddpdoctor NAME`)
    cli           "module:attribute" of the click command: its options, and parse -> gather -> run -> render
    context_type  "module:Class" of the typed context its checks read; a check tagged NAME must read this
                  type (or a base of it). None: the command runs no registered checks, and no check may be
                  tagged with it.
    section       module with `lines(report)` writing the command's own part of the text report, or None
    """

    name: str
    cli: str
    context_type: str | None = None
    section: str | None = None

    def load_cli(self):
        return resolve(self.cli)

    def load_context_type(self) -> type | None:
        return resolve(self.context_type) if self.context_type else None


def resolve(target: str):
    """The object a "module:attribute" string names (imported now)."""
    mod, _, attr = target.partition(":")
    return getattr(importlib.import_module(mod), attr)


# The order is the order of `ddpdoctor --help`.
COMMANDS: tuple[Command, ...] = (
    Command("network", "ddpdoctor.cli.network:network", "ddpdoctor.facts.network:NetworkFacts",
            section="ddpdoctor.render.network"),
    Command("list-checks", "ddpdoctor.cli.list_checks:list_checks"),
    Command("explain", "ddpdoctor.cli.explain:explain"),
    Command("smoke", "ddpdoctor.cli.smoke:smoke", "ddpdoctor.facts.smoke:SmokeWorld",
            section="ddpdoctor.render.smoke"),
    Command("prolog", "ddpdoctor.cli.prolog:prolog", "ddpdoctor.facts.node:PrologFacts"),
    Command("cluster", "ddpdoctor.cli.cluster:cluster", "ddpdoctor.facts.cluster:ClusterView",
            section="ddpdoctor.render.cluster"),
    Command("lint", "ddpdoctor.cli.lint:lint"),
    Command("run", "ddpdoctor.cli.run:run", "ddpdoctor.runcmd.facts:LaunchFacts"),
    Command("inspect", "ddpdoctor.cli.inspect:inspect_cmd", "ddpdoctor.facts.inspect:InspectContext",
            section="ddpdoctor.render.inspect"),
    Command("arm", "ddpdoctor.cli.arm:arm"),
    Command("watch", "ddpdoctor.cli.watch:watch"),
)

BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}
if len(BY_NAME) != len(COMMANDS):
    raise ValueError("two commands share a name")


def get(name: str) -> Command | None:
    return BY_NAME.get(name)


def check_tags() -> frozenset[str]:
    """The names a check's tags may use: the commands that run checks."""
    return frozenset(c.name for c in COMMANDS if c.context_type)
