"""Scaffold a lint rule: its module, its fixtures, its generated page.

    python -m ddpdoctor.lint.new_rule DL015 short_name ["Title of the rule"]

Writes ddpdoctor/lint/rules/dl015_short_name.py (a rule that finds nothing yet, with the docstring
sections to fill) and ddpdoctor/lint/rules/fixtures/DL015/{bad,ok}.py, then regenerates
docs/reference/lint/. The steps after it are in docs/writing-a-lint-rule.md.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

RULES_DIR = Path(__file__).resolve().parent / "rules"

TEMPLATE = '''"""{id}: {title}."""
from __future__ import annotations

from ddpdoctor.lint.context import Context
from ddpdoctor.lint.registry import rule
from ddpdoctor.model import Severity


@rule("{id}", "{title}", severity=Severity.WARNING)
def {name}(ctx: Context):
    """## What it checks
    TODO: the code this rule reports, in one paragraph.

    ## Why it matters
    TODO: what goes wrong when the job runs, with the message torch or NCCL prints (cite the source).

    ## Fix
    TODO: the corrected code.
    """
    for mod, call, qualname in ctx.group.calls:  # every call in the script and the local modules it imports
        if qualname == "TODO.the.call.you.look.for":
            yield ctx.finding("{id}", mod, call, f"{{mod.source(call)}}: TODO what is wrong", "TODO: the fix")
'''

BAD = '''import torch
import torch.distributed as dist

# TODO: the mistake; end the line that must be reported with a marker:
x = 1  # expect: {id}
'''

OK = '''import torch
import torch.distributed as dist

# TODO: the correct form of the same code (no finding from any rule)
'''


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpdoctor.lint.new_rule")
    ap.add_argument("id", help="DL + 3 digits, never used before")
    ap.add_argument("name", help="the rule function's name, e.g. nccl_blocking_wait_renamed")
    ap.add_argument("title", nargs="?", help="one line: what the rule finds")
    a = ap.parse_args(argv)
    rid = a.id.upper()
    if not re.fullmatch(r"DL\d{3}", rid):
        print(f"bad rule id {a.id!r}: want DL + 3 digits", file=sys.stderr)
        return 2
    if not re.fullmatch(r"[a-z][a-z0-9_]*", a.name):
        print(f"bad name {a.name!r}: want a Python function name in snake_case", file=sys.stderr)
        return 2
    if list(RULES_DIR.glob(f"{rid.lower()}_*.py")) or (RULES_DIR / "fixtures" / rid).exists():
        print(f"{rid} exists already (ids are never reused)", file=sys.stderr)
        return 2
    title = a.title or a.name.replace("_", " ").capitalize()
    mod = RULES_DIR / f"{rid.lower()}_{a.name}.py"
    mod.write_text(TEMPLATE.format(id=rid, title=title.replace('"', "'"), name=a.name))
    fx = RULES_DIR / "fixtures" / rid
    fx.mkdir(parents=True)
    (fx / "bad.py").write_text(BAD.format(id=rid))
    (fx / "ok.py").write_text(OK)
    from ddpdoctor.lint import gendocs
    gendocs.main([])
    for p in (mod, fx / "bad.py", fx / "ok.py"):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
