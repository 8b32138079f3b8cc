"""`ddpdoctor lint PATH...`: static checks of distributed training scripts (never imports torch)."""
from __future__ import annotations

import os
import sys

import click

from ddpdoctor.model import Severity

_FAIL_ON = click.Choice(["error", "warning"], case_sensitive=False)


@click.command("lint")
@click.argument("paths", nargs=-1, metavar="PATH...")
@click.option("--select", "select", multiple=True, metavar="PREFIX", help="Only rules whose id starts with PREFIX (repeatable, e.g. DL00).")
@click.option("--ignore", "ignore", multiple=True, metavar="PREFIX", help="Skip rules whose id starts with PREFIX (repeatable).")
@click.option("--fix", is_flag=True, help="Apply the safe fixes in place (LibCST: formatting and comments are kept).")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix, also apply fixes marked unsafe.")
@click.option("--json", "json_out", is_flag=True, help="Print only JSON on stdout.")
@click.option("--fail-on", type=_FAIL_ON, default="error", show_default=True, help="Lowest severity that makes the exit code 1.")
@click.option("--rule", "rule_id", metavar="DLnnn", help="Print a rule's documentation and exit.")
@click.option("--list-rules", is_flag=True, help="List the rules and exit.")
def lint(paths, select, ignore, fix, unsafe_fixes, json_out, fail_on, rule_id, list_rules):
    """Find distributed-training mistakes in Python scripts and notebooks, before the job starts.

    \b
    ddpdoctor lint train.py                 one script (and the local modules it imports)
    ddpdoctor lint src/ --select DL00       a tree, some rules
    ddpdoctor lint train.py --fix           apply the safe fixes
    ddpdoctor lint --rule DL001             what a rule checks and how to fix it

    Silence one line with `# noqa: DL001`. Exit 0 clean, 1 findings at --fail-on or above,
    2 bad input (unreadable file, syntax error) and nothing worse, 3 a rule crashed (a bug).
    """
    from ddpdoctor.cli import fail_usage
    from ddpdoctor.lint.registry import all_rules

    rules = all_rules()
    if rule_id:
        r = rules.get(rule_id.upper())
        if r is None:
            fail_usage(f"no lint rule {rule_id!r}; `ddpdoctor lint --list-rules` lists them")
        click.echo(f"{r.id}: {r.title}  [{r.severity.label}, fix: {r.fix_kind}]\n\n{r.doc}")
        return
    if list_rules:
        for r in rules.values():
            click.echo(f"{r.id}  {r.severity.label:7}  {r.fix_kind:6}  {r.title}")
        return
    if not paths:
        fail_usage("lint needs at least one PATH (a .py file, a notebook, or a directory)")
    for p in (*select, *ignore):
        if not p.upper().startswith("DL"):
            fail_usage(f"--select/--ignore take lint rule ids or prefixes (DL001, DL0); got {p!r}")

    from ddpdoctor.lint import lint_paths

    import time
    linted_since = time.time_ns()
    res = lint_paths(paths, select, ignore)
    fixed: dict = {}
    if fix:
        from ddpdoctor.lint import fix as fixmod
        from ddpdoctor.lint.source import InputProblem
        left: list = []
        fixed = fixmod.apply(res.findings, unsafe=unsafe_fixes, roots=list(paths), linted_since_ns=linted_since,
                             skipped=left)
        if fixed:
            res2 = lint_paths(paths, select, ignore)
            res2.duration_s += res.duration_s
            res = res2
        res.problems += [InputProblem(f, why) for f, why in left]
    level = Severity.WARNING if fail_on.lower() == "warning" else Severity.ERROR
    worst = max((f.severity for f in res.findings), default=None)
    code = 0
    if res.crashes:
        code = 3
    if worst is not None and worst >= level:
        code = 1
    elif res.problems and code == 0:
        code = 2
    n_fixed = sum(len(v) for v in fixed.values())
    if json_out:
        from ddpdoctor.render import json as rj
        click.echo(rj.document({
            "schema": 1, "command": "lint", "exit_code": code, "files": res.files,
            "duration_s": round(res.duration_s, 4), "fixed": n_fixed,
            "findings": [f.to_dict() for f in res.findings],
            "problems": [{"path": p.path, "line": p.line, "reason": p.reason} for p in res.problems],
            "crashes": res.crashes}))
        sys.exit(code)
    _write_text(res, n_fixed)
    sys.exit(code)


def _colour() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _write_text(res, n_fixed: int) -> None:
    from ddpdoctor.render.safe import terminal_text
    col = _colour()

    def echo(text, **kw):  # findings quote the linted code and paths: their escape sequences stay escaped
        click.echo(terminal_text(str(text), colour=col), **kw)

    def paint(s, c):
        return f"\033[{c}m{s}\033[0m" if col else s

    for p in res.problems:
        echo(f"{p}", err=True)
    for c in res.crashes:
        echo(f"☠ {c}", err=True)
    for f in res.findings:
        sev = paint(f.severity.label, "31" if f.severity >= Severity.ERROR else "33")
        echo(f"{f.where or f'{f.path}:{f.line}'}:{f.col}: {paint(f.rule, '1')} {sev}  {f.message}")
        if f.fix:
            tag = {"safe": " [--fix]", "unsafe": " [--fix --unsafe-fixes]"}.get(f.fix_kind, "")
            echo(f"    fix: {f.fix}{tag}")
        if f.code:
            echo(f"         {f.code}")
    errs = sum(f.severity >= Severity.ERROR for f in res.findings)
    warns = len(res.findings) - errs
    fixable = sum(f.fix_kind == "safe" for f in res.findings)
    parts = [f"{errs} error{'s' * (errs != 1)}", f"{warns} warning{'s' * (warns != 1)}"]
    tail = f"; {fixable} fixable with --fix" if fixable else ""
    if n_fixed:
        tail += f"; fixed {n_fixed}"
    if res.problems:
        tail += f"; {len(res.problems)} file(s) could not be linted"
    echo(f"{', '.join(parts)} in {res.files} file{'s' * (res.files != 1)}{tail} ({res.duration_s:.2f} s)")
