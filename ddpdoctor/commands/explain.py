"""`ddpdoctor explain DDnnn`: print a check's documentation."""
from __future__ import annotations

import click

from ddpdoctor import registry
from ddpdoctor.validate import BadInput


def check_page(chk: registry.Check) -> str:
    """The one documentation page of a check (also written to checks/<id>.md)."""
    return (f"# {chk.id}: {chk.title}\n\n"
            f"category: {chk.category} · commands: {', '.join(sorted(chk.tags)) or '-'}\n\n"
            f"{chk.doc}\n")


@click.command("explain")
@click.argument("what")
def explain(what: str):
    """Explain a check (DDnnn): what it checks, why it matters, how to fix it."""
    chk = registry.get(what.strip())
    if chk is None:
        raise BadInput(f"unknown check {what!r}; `ddpdoctor list-checks` lists them")
    click.echo(check_page(chk), nl=False)
