"""`ddpdoctor list-checks`: the registry as a table (or JSON)."""
from __future__ import annotations

import click

from ddpdoctor import registry


@click.command("list-checks")
@click.option("--json", "json_out", is_flag=True, help="JSON instead of a table.")
@click.option("--select", multiple=True, metavar="PREFIX", help="Only ids starting with PREFIX.")
def list_checks(json_out: bool, select: tuple[str, ...]):
    """List every check: id, category, title."""
    checks = sorted(registry.select(None, select=select), key=lambda c: c.id)
    if json_out:
        from ddpdoctor.render import json as rj
        click.echo(rj.document([{"id": c.id, "title": c.title, "category": c.category,
                                  "commands": sorted(c.tags)} for c in checks]))
        return
    for c in checks:
        click.echo(f"{c.id}  {c.category:<12} {c.title}")
