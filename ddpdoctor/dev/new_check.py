"""`python -m ddpdoctor.dev new-check DDnnn "title" --category nic [--tags network,prolog] [--module nic]`.

Appends a check to a module of ddpdoctor/checks/ (found on its own: no list to edit) and writes its unit
test, tests/test_check_ddnnn.py. Both hold TODOs; tests/test_dev_scaffold.py fails while a registered
check still carries one, so an unfilled scaffold cannot ship. The steps: docs/writing-a-check.md.
"""
from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

from ddpdoctor.dev.ids import Refused, id_in_use, next_free_check_id

ROOT = Path(__file__).resolve().parents[2]
CHECKS_DIR = ROOT / "ddpdoctor" / "checks"

CHECK_TEMPLATE = '''

@check("{id}", "{title}", category="{category}", tags={tags}, timeout=2)
def {func}(ctx):
    """## What it checks
    TODO: what this check verifies, in one paragraph.

    ## Why it matters
    TODO: how the job fails when it does not hold (the message torch or NCCL prints; cite the source).

    ## Fix
    TODO: what to change; the finding's Fix carries the commands to paste.
    """
    value = ctx.TODO_fact  # TODO: the fact this check judges: an attribute of {context}
    if value is None:
        raise Skip("TODO: why the check does not apply here")
    if value == "TODO: the wrong value":
        yield Finding(Severity.ERROR, f"TODO: what is wrong, naming the value: {{value!r}}",
                      fix=Fix("TODO: the fix in one sentence", ("TODO: a command to paste",)),
                      evidence={{"value": value}}, kind="todo")
'''

TEST_TEMPLATE = '''"""{id}: {title} (facts -> findings, with plain data)."""
from types import SimpleNamespace

from ddpdoctor import registry
from ddpdoctor.runner import run_checks


def run(ctx):
    [result] = run_checks([registry.get("{id}")], ctx, deadline=5)
    return result


def facts(**seed):
    # TODO: seed the facts the check reads. A SimpleNamespace with those attributes is enough for
    # judgement; tests/test_network_judgement.py seeds a real NetworkFacts the same way.
    return SimpleNamespace(**seed)


def test_{slug}_finds_the_wrong_value():
    result = run(facts(TODO_fact="TODO: the wrong value"))
    assert [f.sub_id("{id}") for f in result.findings] == ["{id}.todo"]


def test_{slug}_is_quiet_when_it_holds():
    assert run(facts(TODO_fact="TODO: a right value")).findings == ()
'''

NEEDED = {"check": "from ddpdoctor.registry import Skip, check", "Skip": "from ddpdoctor.registry import Skip, check",
          "Finding": "from ddpdoctor.model import Finding, Fix, Severity",
          "Fix": "from ddpdoctor.model import Finding, Fix, Severity",
          "Severity": "from ddpdoctor.model import Finding, Fix, Severity"}


def _imported_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _add_imports(text: str) -> str:
    """The module's text with the imports the template uses added after its last top-level import."""
    tree = ast.parse(text)
    missing = sorted({NEEDED[n] for n in NEEDED if n not in _imported_names(tree)})
    if not missing:
        return text
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    lines = text.splitlines(keepends=True)
    at = imports[-1].end_lineno if imports else 0
    return "".join(lines[:at] + [m + "\n" for m in missing] + lines[at:])


def _default_tags(category: str, checks) -> list[str]:
    sets = collections.Counter(tuple(sorted(c.tags)) for c in checks if c.category == category and c.tags)
    if not sets:
        raise Refused(f"no check of category {category!r} yet: say which commands run it with --tags")
    return list(sets.most_common(1)[0][0])


def _default_module(category: str, checks) -> str:
    if (CHECKS_DIR / f"{category}.py").exists():
        return category
    where = collections.Counter(c.func.__module__.rsplit(".", 1)[-1] for c in checks if c.category == category)
    if not where:
        raise Refused(f"no module holds {category!r} checks yet: name one with --module (a new name creates it)")
    return where.most_common(1)[0][0]


def new_check(check_id: str, title: str, category: str, tags: str | None, module: str | None) -> list[Path]:
    from ddpdoctor import commands, registry
    from ddpdoctor.model import CATEGORIES
    cid = check_id.upper()
    if not registry.ID_RE.match(cid):
        raise Refused(f"bad check id {check_id!r}: want DD + 3 digits, e.g. DD306")
    if category not in CATEGORIES:
        raise Refused(f"unknown category {category!r} (one of: {', '.join(CATEGORIES)})")
    if registry.CATEGORY_DIGIT[cid[2]] != category:
        raise Refused(f"{cid} is in category {registry.CATEGORY_DIGIT[cid[2]]!r} (its first digit), not {category!r}")
    if not title.strip() or '"' in title or "\n" in title or "TODO" in title:
        raise Refused("the title is one line without double quotes, e.g. \"MASTER_PORT is below 1024\"")
    checks = list(registry.load_all().values())
    used = id_in_use(cid, ROOT, registered=registry.load_all())
    if used:
        free = next_free_check_id(cid[2], ROOT, registry.load_all())
        raise Refused(used + (f" (the next free id in {category}: {free})" if free else ""))
    tag_list = [t.strip() for t in tags.split(",") if t.strip()] if tags else _default_tags(category, checks)
    unknown = sorted(set(tag_list) - commands.check_tags())
    if unknown:
        raise Refused(f"tags {unknown} name no command that runs checks (known: {', '.join(sorted(commands.check_tags()))})")
    contexts = {commands.get(t).context_type for t in tag_list}
    mod_name = module or _default_module(category, checks)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", mod_name):
        raise Refused(f"bad module name {mod_name!r}: a module of ddpdoctor/checks/, e.g. nic")
    path = CHECKS_DIR / f"{mod_name}.py"
    test = ROOT / "tests" / f"test_check_{cid.lower()}.py"
    if test.exists():
        raise Refused(f"{test} exists already")
    func = f"{cid.lower()}_" + "_".join(re.findall(r"[a-z0-9]+", title.lower()))[:60]
    text = path.read_text(encoding="utf-8") if path.exists() else \
        (f'"""Checks of {category}: TODO what this module judges."""\nfrom __future__ import annotations\n\n'
         "from ddpdoctor.model import Finding, Fix, Severity\nfrom ddpdoctor.registry import Skip, check\n")
    text = _add_imports(text).rstrip("\n") + "\n" + CHECK_TEMPLATE.format(
        id=cid, title=title.strip(), category=category, tags="{" + ", ".join(f'"{t}"' for t in sorted(tag_list)) + "}",
        func=func, context=" or ".join(sorted(c.split(":")[-1] for c in contexts if c)))
    path.write_text(text, encoding="utf-8")
    test.write_text(TEST_TEMPLATE.format(id=cid, title=title.strip(), slug=cid.lower()), encoding="utf-8")
    return [path, test]
