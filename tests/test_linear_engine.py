"""RE2 and Python's re give the log scan the same answers (ddpdoctor/logscan/linear.py): every catalog and fact
pattern, on every line of the logs we hold that the scan would search with it, on each pattern's example and
on variants of them that probe where the engines' syntax differs (\\v and \\x1c-\\x1f are `\\s` in Python, not
in RE2; `$`; non-ASCII text); and the two-step search of `re`-only patterns finds what a plain search finds."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ddpdoctor import catalog
from ddpdoctor.logscan import linear
from ddpdoctor.logscan.matcher import Matcher, split_origin

ROOT = Path(__file__).resolve().parent.parent
RULES = Matcher(catalog.failures()).rules
needs_re2 = pytest.mark.skipif(linear.engine() is None and not os.environ.get("CI"), reason="google-re2 not installed")


def _lines() -> list[str]:
    out = []
    for path in sorted((ROOT / "tests" / "logs").glob("*/*.log")) + sorted((ROOT / "tests" / "corpus").glob("*/*.log")):
        for raw in path.read_bytes().split(b"\n"):
            text = raw.decode("utf-8", "replace").replace("\x00", "").strip("\r")[:2000]
            out.append(split_origin(text)[0])
    return out


LINES = _lines()


def _variants(s: str) -> list[str]:
    """`s` with its spaces as other characters Python calls whitespace, with a non-ASCII letter and digit,
    padded past linear.SHORT, and cut before its end (where `$` and `\\b` fall)."""
    pad = "x" * (linear.SHORT + 1) + " "
    out = [s, pad + s, s + " " + pad, pad + s[: len(s) // 2], pad + s[:-1]]
    for ws in ("\v", "\x1c", "\x1f", "\f", "\t", "\xa0"):
        out.append(pad + s.replace(" ", ws))
    out += [pad + s.replace("0", "٠"), pad + s.replace("e", "é"), pad + re.sub(r"\d", "7", s)]
    return out


def _answer(m):
    return None if m is None else (m.start(), m.end(), m.groupdict())


@needs_re2
@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.failure.id if r.failure else r.fact.name}#{r.index}")
def test_re2_and_re_agree_on_every_line_the_scan_would_search(rule, monkeypatch):
    monkeypatch.setattr(linear, "SHORT", 0)  # every ASCII line to RE2, however short
    if rule.regex.re2 is None and linear.engine() is not None and linear._to_re2(rule.regex.pattern) is not None:
        monkeypatch.setattr(linear, "_bounded", lambda pattern: False)  # a bounded one too, as if it went to RE2
        rule = replace(rule, regex=linear.LinePattern(rule.regex.py))
    example = (rule.signature.example if rule.signature else rule.fact.example) or ""
    lines = [s for s in LINES if any(t.decode() in s.lower() for t in rule.triggers)]
    for s in lines + [v for e in [example] + lines[:20] for v in _variants(e)]:
        assert _answer(rule.regex.search(s)) == _answer(rule.regex.py.search(s)), (rule.regex.pattern, s)


def test_nearly_every_pattern_runs_on_re2():
    if linear.engine() is None:
        pytest.skip("google-re2 not installed")
    on_re = [r.regex.pattern for r in RULES if r.regex.re2 is None and not linear._bounded(r.regex.pattern)]
    # look-around is all RE2 lacks here; each of these is timed on hostile lines (test_hostile_regex.py), as are
    # the patterns that repeat nothing without bound (linear on re: each attempt is bounded by the pattern)
    assert all(re.search(r"\(\?<?[=!]", p) for p in on_re), on_re


@pytest.mark.parametrize("pattern,bounded", [
    (r"NCCL WARN (?:a|b) \d{1,18} x?", True),
    (r"a[^\n]*b", False), (r"a\d+", False), (r"(?:a(?:b|c+))", False), (r"a{2,}", False), (r"(?=a*)b", False),
])
def test_bounded_patterns_stay_on_re(pattern, bounded):
    assert linear._bounded(pattern) is bounded


@pytest.mark.parametrize("pattern,expect", [
    (r"a\sb", r"a[\t-\r\x1c-\x20]b"),
    (r"[^\s:]+", r"[^\t-\r\x1c-\x20:]+"),
    (r"x\S+", r"x[^\t-\r\x1c-\x20]+"),
    (r"end\Z", r"end\z"),
    (r"[]a]\]", r"[]a]\]"),
    (r"[[:alpha:]]", None),    # RE2: a POSIX class; Python: the characters [:alph and a ']'
    (r"a{,3}", None),           # Python: up to 3; RE2: the characters
    (r"(a)\1", None),           # a backreference
    (r"[\S]", None),
    ("é", None),
    (r"a(?#note)b", None),
])
def test_the_spelling_for_re2(pattern, expect):
    assert linear._to_re2(pattern) == expect


@pytest.mark.parametrize("pattern", [
    r"Gloo connectFullMesh failed with [^\n]*(?:Connect timeout|timed out connecting(?!: SO_ERROR: Connection refused))",
    r"(?i)NCCL WARN[^\n]*(?:unable to allocate|shm_open failed\s*: (?!Permission denied))",
    r"ab.*?c(?=d)",
])
def test_the_first_literal_two_step_finds_what_a_search_finds(pattern):
    lp = linear.LinePattern(pattern)
    assert lp.engine == "re, first literal"
    pieces = ["Gloo connectFullMesh failed with ", "timed out connecting", ": SO_ERROR: Connection refused", "Connect timeout",
              "NCCL WARN ", "nccl warn", "shm_open failed : ", "Permission denied", "unable to allocate", "ab", "c", "d",
              "é", " ", "x" * (linear.SHORT + 1)]
    import random
    rnd = random.Random(21)
    for _ in range(3000):
        s = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 12)))
        assert _answer(lp.search(s)) == _answer(lp.py.search(s)), s


@pytest.mark.torchjob  # runs the scan in two child processes (tests/conftest.py kinds)
def test_without_the_wheel_the_scan_finds_the_same_lines():
    # DDPDOCTOR_NO_RE2=1: what a machine without google-re2 runs; same lines and groups as with it
    code = ("import sys; from ddpdoctor import catalog; from ddpdoctor.logscan import linear; from ddpdoctor.logscan.matcher "
            "import Matcher\nlinear.SHORT = 0\nm = Matcher(catalog.failures())\nfor p in sys.argv[1:]:\n"
            "    for lm in m.scan(open(p, 'rb')):\n"
            "        print(p, lm.line, sorted((r.index, sorted(g.items())) for r, g in lm.matches))\n")
    logs = [str(p) for p in sorted((ROOT / "tests" / "logs").glob("*/*.log"))]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [subprocess.run([sys.executable, "-c", code, *logs], capture_output=True, text=True, timeout=300,
                           env={**env, **extra}) for extra in ({}, {"DDPDOCTOR_NO_RE2": "1"})]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.count("\n") > 100
