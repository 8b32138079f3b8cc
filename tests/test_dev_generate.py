"""Generated docs stay in step with the code, and nothing scaffolded ships with its TODOs."""
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor import catalog, commands, registry
from ddpdoctor.dev import generate
from ddpdoctor.finding_kinds import describe, kinds_of
from ddpdoctor.model import Finding, Severity

ROOT = Path(__file__).resolve().parents[1]


def test_every_generated_page_and_table_is_up_to_date():
    stale = generate.stale(ROOT)
    assert not stale, "\n".join(stale) + "\nrun: python -m ddpdoctor.dev generate-all"


def test_the_check_tables_of_the_guides_are_generated():
    # the hand tables of network.md, slurm.md and lint.md went stale unflagged; these markers keep them generated
    for doc, marker in (("network.md", "checks network"), ("slurm.md", "checks prolog"), ("lint.md", "lint rules")):
        assert f"<!-- generated: {marker} -->" in (ROOT / "docs" / doc).read_text(), doc


def _tree(tmp_path, body):
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "guide.md"
    doc.write_text(f"# Guide\n\nprose stays\n\n<!-- generated: checks prolog -->\n{body}<!-- end generated -->\n\nafter\n")
    return doc


def test_generate_all_check_lists_a_stale_table_and_write_fixes_only_the_block(tmp_path):
    doc = _tree(tmp_path, "| DD201 | hand-written, stale |\n")
    stale = generate.stale(tmp_path)
    assert "stale: docs/guide.md" in stale
    assert "missing: docs/reference/checks/DD201.md" in stale  # a fresh tree has no pages yet
    generate.write(tmp_path)
    text = doc.read_text()
    prolog = sorted(c.id for c in registry.load_all().values() if "prolog" in c.tags)
    assert text.startswith("# Guide\n\nprose stays\n\n<!-- generated: checks prolog -->\n| id |")
    assert text.endswith("<!-- end generated -->\n\nafter\n") and "hand-written" not in text
    assert [ln.split("]")[0][3:] for ln in text.splitlines() if ln.startswith("| [DD")] == prolog
    assert generate.stale(tmp_path) == []


def test_an_orphaned_page_is_listed_and_removed(tmp_path):
    _tree(tmp_path, "")
    generate.write(tmp_path)
    orphan = tmp_path / "docs" / "reference" / "checks" / "DD999.md"
    orphan.write_text("# a retired check\n")
    assert generate.stale(tmp_path) == ["orphaned: docs/reference/checks/DD999.md"]
    generate.write(tmp_path)
    assert not orphan.exists()


def test_a_marker_naming_no_table_is_one_clear_error(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text("<!-- generated: checks netwrok -->\n<!-- end generated -->\n")
    with pytest.raises(generate.GenerateError, match="no command 'netwrok' runs checks"):
        generate.plan(tmp_path)


@pytest.mark.torchjob  # runs the command as a subprocess (tests/conftest.py)
def test_generate_all_check_exits_1_and_names_the_file(tmp_path):
    # the real command on the real tree: 0 when in step (the test above), else 1 with one line per file
    p = subprocess.run([sys.executable, "-m", "ddpdoctor.dev", "generate-all", "--check"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0 and p.stdout == "", p.stdout + p.stderr


# Finding kinds, read from the code.

STATE_KIND = {"a": "refused", "b": "filtered"}


def _yields_every_form(ctx):
    yield Finding(Severity.INFO, "no kind")
    yield Finding(Severity.ERROR, "literal", kind="literal")
    yield Finding(Severity.ERROR, "either", kind="one" if ctx else "other")
    yield Finding(Severity.ERROR, "table", kind=STATE_KIND.get(ctx, "error"))
    yield from _helper(ctx)


def _helper(ctx):
    return [Finding(Severity.ERROR, "computed", kind=ctx.kind)]


def test_kinds_are_read_from_every_form_a_check_writes():
    k = kinds_of(_yields_every_form)
    assert k.literal == ("default", "error", "filtered", "literal", "one", "other", "refused")
    assert k.computed == ()  # _helper lives outside ddpdoctor: not followed
    assert kinds_of(_helper).computed == ("ctx.kind",)
    assert "computed at run time" in describe("DD999", kinds_of(_helper))


def test_helpers_in_other_modules_are_followed():
    # DD504 and DD716 judge version drift through checks/drift.py's finding(), which leaves the default kind
    assert kinds_of(registry.get("DD716").func).literal == ("default",)
    assert set(kinds_of(registry.get("DD102").func).literal) >= {"refused", "filtered", "no-route", "open"}


def test_explain_lists_a_checks_finding_ids():
    from click.testing import CliRunner
    from ddpdoctor.cli.explain import explain
    out = CliRunner().invoke(explain, ["DD102"]).output
    assert "## Finding ids" in out and "- `DD102.refused`" in out
    import json
    d = json.loads(CliRunner().invoke(explain, ["DD102", "--json"]).output)
    assert "DD102.filtered" in d["check"]["finding_ids"]


# Nothing scaffolded ships unfilled (python -m ddpdoctor.dev new-check / new-mode / new-command).

def test_no_check_still_holds_its_scaffold_todos():
    left = [c.id for c in registry.load_all().values()
            if "TODO" in c.doc or "TODO" in c.title or "todo" in kinds_of(c.func).literal]
    assert not left, f"checks with TODOs left from `new-check`: {left} (docs/writing-a-check.md, step 2)"


def test_no_failure_mode_or_log_still_holds_its_scaffold_todos():
    left = [fm.id for fm in catalog.failures().values()
            if any("TODO" in str(v) for v in (fm.title, fm.summary, fm.cause, fm.confirm, fm.preflight, fm.fix.summary))
            or any("TODO" in s.pattern or "TODO" in s.example for s in fm.signatures)]
    logs = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests" / "logs").glob("*/*.log"))
            if "TODO: " in p.read_text(errors="replace")]
    assert not left and not logs, f"TODOs left from `new-mode`: {left + logs} (docs/writing-a-failure-mode.md)"


def test_no_command_still_holds_its_scaffold_todos():
    left = [c.name for c in commands.COMMANDS if "TODO" in (c.load_cli().help or "")]
    assert not left, f"commands with TODOs left from `new-command`: {left} (docs/writing-a-command.md)"
