"""`ddpdoctor list-checks`: every id ddpdoctor knows, as a table (or JSON): the checks, the lint rules,
and the failure modes `explain --log` recognises; `ddpdoctor explain ID` documents each one."""
from __future__ import annotations

import click

from ddpdoctor import registry


def _entries(select: tuple[str, ...]) -> list[dict]:
    from ddpdoctor import catalog
    from ddpdoctor.lint.registry import all_rules  # lint's public registry (ids, titles, severities)

    def keep(i: str) -> bool:
        return not select or any(i.upper().startswith(p.upper()) for p in select)
    checks = [{"kind": "check", "id": c.id, "title": c.title, "category": c.category, "commands": sorted(c.tags)}
              for c in sorted(registry.select(None, select=select), key=lambda c: c.id)]
    rules = [{"kind": "lint rule", "id": r.id, "title": r.title, "category": r.severity.label}
             for r in sorted(all_rules().values(), key=lambda r: r.id) if keep(r.id)]
    modes = [{"kind": "failure mode", "id": fm.id, "title": fm.title, "category": fm.category}
             for fm in sorted(catalog.failures().values(), key=lambda fm: fm.id) if keep(fm.id)]
    return checks + rules + modes


_HEADINGS = {"lint rule": "lint rules (`ddpdoctor lint`)",
             "failure mode": "failure modes (`ddpdoctor explain --log` recognises them)"}


@click.command("list-checks")
@click.option("--json", "json_out", is_flag=True, help="JSON instead of a table.")
@click.option("--select", multiple=True, metavar="PREFIX", help="Only ids starting with PREFIX (DD3, DL0, NCCL_).")
def list_checks(json_out: bool, select: tuple[str, ...]):
    """List every check, lint rule and failure mode: id, category, title.

    `ddpdoctor explain ID` prints the page of any of them.
    """
    entries = _entries(select)
    if json_out:
        from ddpdoctor.render import json as rj
        click.echo(rj.document(entries))
        return
    kind = "check"
    widths: dict[str, int] = {}
    for e in entries:
        widths[e["kind"]] = max(widths.get(e["kind"], 0), len(e["id"]))
    for e in entries:
        if e["kind"] != kind:
            kind = e["kind"]
            click.echo(f"\n{_HEADINGS[kind]}")
        width = widths[kind]
        click.echo(f"{e['id']:<{width}}  {e['category']:<12} {e['title']}")
