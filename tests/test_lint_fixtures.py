"""Every rule on every fixture: the lines marked `# expect: DLnnn` get exactly those findings, every
other line none (from any rule); `--fix` output parses and keeps every comment."""
import io
import re
import shutil
import tokenize
from pathlib import Path

import pytest

from ddpdoctor.lint import fix as fixmod
from ddpdoctor.lint import lint_paths
from ddpdoctor.lint.registry import all_rules

FIXTURES = Path(__file__).resolve().parents[1] / "ddpdoctor" / "lint" / "rules" / "fixtures"
EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")


def fixtures():
    out = []
    for d in sorted(FIXTURES.glob("DL*")):
        for p in sorted(d.iterdir()):
            if p.suffix == ".py":
                out.append(p)
            elif p.is_dir() and (p / "train.py").is_file():
                out.append(p / "train.py")
    return out


def expected(entry: Path):
    root = entry.parent if entry.name == "train.py" and entry.parent.parent.parent == FIXTURES else None
    files = sorted(root.rglob("*.py")) if root else [entry]
    want = set()
    for f in files:
        for i, line in enumerate(f.read_text().splitlines(), 1):
            m = EXPECT.search(line)
            if m:
                want |= {(f.name, i, r.strip()) for r in m.group(1).split(",") if r.strip()}
    return want


def comments(text: str) -> list[str]:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]


def test_every_rule_has_a_bad_and_an_ok_fixture():
    for rid in all_rules():
        names = [p.name for p in (FIXTURES / rid).iterdir()]
        assert any(n.startswith("bad") for n in names), f"{rid} has no bad fixture"
        assert any(n.startswith("ok") for n in names), f"{rid} has no ok fixture"


@pytest.mark.parametrize("entry", fixtures(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_rule_on_the_fixture_finds_exactly_the_marked_lines(entry):
    res = lint_paths([str(entry)])
    assert not res.crashes and not res.problems
    got = {(Path(f.path).name, f.line, f.rule) for f in res.findings}
    assert got == expected(entry)
    if entry.name.startswith("bad") or entry.parent.name.startswith("bad"):
        rid = entry.parent.name if entry.name != "train.py" else entry.parent.parent.name
        assert any(r == rid for _, _, r in got), f"{entry} shows no {rid}"


@pytest.mark.parametrize("entry", fixtures(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fix_output_parses_keeps_comments_and_removes_what_it_fixed(entry, tmp_path):
    src = entry.parent if entry.name == "train.py" else entry
    dst = tmp_path / src.name
    if src.is_dir():
        shutil.copytree(src, dst)
        dst = dst / "train.py"
    else:
        shutil.copy(src, dst)
    before = {p: p.read_text() for p in dst.parent.rglob("*.py")}
    res = lint_paths([str(dst)])
    done = fixmod.apply(res.findings, unsafe=True)
    for p, old in before.items():
        new = p.read_text()
        compile(new, str(p), "exec")  # parses
        assert comments(new) == comments(old)  # every comment kept, in order
        if str(p) not in done:
            assert new == old
    fixed = {(f.rule, f.line) for fs in done.values() for f in fs}
    again = {(f.rule, f.line) for f in lint_paths([str(dst)]).findings}
    assert not (fixed & again), "a fixed finding is still reported"


def test_a_finding_in_an_imported_module_names_the_call_chain_from_the_linted_file():
    entry = FIXTURES / "DL014" / "bad_utils" / "train.py"
    (f,) = lint_paths([str(entry)]).findings
    assert f.path.endswith("utils/distributed.py") and f.line == 9
    assert f.message.endswith(f"(reached from {entry}:7 distributed.init())")
