"""Search a catalog or fact pattern in one log line in time linear in the line.

Python's `re` backtracks: `A[^\\n]*B` retries its scan from every A on a line with many A and no B after
them, so a 2000-character line cost 20-47 ms per pattern (issue 21; tests/test_hostile_regex.py times every
pattern). RE2 (google-re2, docs/dependencies.md) runs an automaton instead: linear in the line whatever the
pattern. It has no look-around, so the few patterns with one stay on `re`. Of those, one that starts with a
literal followed by `[^\\n]*` (or `.*`) is searched in two steps (`_lead`): the literal's first occurrence,
then one match attempt there. Exact on a line without a newline: a match at a later occurrence q of the
literal implies one at the first, p < q, as `[^\\n]*` can stretch from p over q to where the rest matched, and
every match starts at an occurrence. The test proves every `re`-only pattern linear.

Identical answers, whichever engine runs: RE2 only says where the leftmost match starts (its automaton, no
submatch engine: the cheaper call), and `re` reads the match and its groups with one attempt there: `re`'s own
search would start there too, as both engines accept the same lines. Where RE2's classes differ from Python's they differ only outside ASCII (`\\d`, `\\w`,
`\\b` are ASCII-only in RE2, Unicode in Python) and in `\\s`, which Python also gives \\v and \\x1c-\\x1f: so
`\\s`/`\\S` are spelled out as Python's ASCII set, a pattern with a construct whose meaning could differ is
left to `re` (`_to_re2`), and only an ASCII line without a line end ever goes to RE2 (`$` and `\\b` then mean
the same in both). tests/test_linear_engine.py checks both engines agree on every corpus line and on
mutated lines. Without the wheel (or with DDPDOCTOR_NO_RE2=1) every pattern runs on `re`: the same
answers, quadratic time on hostile lines.

A call into RE2 costs a few microseconds of binding however short the line, where `re` takes a fraction of
one on a short line, so lines up to SHORT characters stay on `re`: there a quadratic pattern's worst stays
within ~20 us (96^2 steps), near the cost of the call (benchmarks/bench_explain.py --hostile measures the
engines on each pattern's worst 2000-character line).
"""
from __future__ import annotations

import os
import re

try:  # the regex parser moved in 3.11; both expose the same parse() (as catalog/model.py reads it)
    import re._constants as _sre  # type: ignore[import-not-found]
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

# Lines up to this many characters are searched with `re` (bounded: SHORT^2 steps at the very worst).
SHORT = 96

# Python's `\s` on ASCII (str.isspace): \t \n \v \f \r, \x1c-\x1f and the space. RE2's `\s` lacks \v and \x1c-\x1f.
_SPACE = r"\t-\r\x1c-\x20"


def _to_re2(pattern: str) -> str | None:
    """`pattern` in RE2's syntax with the same meaning on ASCII text without a newline, or None when
    it uses a construct whose meaning could differ (left to `re`)."""
    if not pattern.isascii():
        return None
    out = []
    i, n = 0, len(pattern)
    in_class = class_start = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            e = pattern[i + 1]
            i += 2
            if e in "sS":
                if in_class:
                    if e == "S":
                        return None  # a negated class inside a class: rare; leave it to re
                    out.append(_SPACE)
                else:
                    out.append(f"[{_SPACE}]" if e == "s" else f"[^{_SPACE}]")
            elif e == "Z" and not in_class:
                out.append(r"\z")
            elif e.isdigit() or (in_class and e == "b") or e in "NuU0":
                return None  # backreferences, octal, \b as backspace, \N{...}, \u...: spell-outs differ
            elif e == "x" and not re.fullmatch(r"[0-9A-Fa-f]{2}", pattern[i:i + 2]):
                return None  # RE2 also reads \x{...}; only Python's \xHH form means the same in both
            elif e.isalpha() and e not in "dDwWbBAtnrfvx":
                return None  # an escape RE2 may read otherwise (\z, \C, \Q, \p ...)
            else:
                out.append("\\" + e)
            class_start = False
            continue
        if in_class:
            if c == "[" and i + 1 < n and pattern[i + 1] in ":.=":
                return None  # RE2 reads [:alpha:] as a POSIX class, Python as characters
            if c == "]" and not class_start:
                in_class = False
            class_start = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            class_start = True  # a ']' right after '[' or '[^' is a character in both
            continue
        if c == "{" and pattern.startswith("{,", i):
            return None  # Python: {0,n}; RE2: literal characters
        if c == "(" and pattern.startswith("(?#", i):
            return None  # a comment
        out.append(c)
        i += 1
    return "".join(out)


def _engine():
    """google-re2's compile and the UNANCHORED anchor, or None (missing, refused, or not the API we know)."""
    if os.environ.get("DDPDOCTOR_NO_RE2"):
        return None
    try:
        import re2
        options = re2.Options()
        options.log_errors = False  # a pattern RE2 refuses goes to re, silently
        # RE2 only says where the match starts (its automaton, without the slower submatch engines); `re` then
        # reads the groups with one match attempt there: the same answer as re's own search, which starts there too
        options.never_capture = True
        anchor = re2._Anchor.UNANCHORED
        probe = re2.compile(r"a(?:b+)c", options)._regexp
        if probe.Match(anchor, b"xxabbc", 0, 6)[0] != (2, 6) or probe.Match(anchor, b"xx", 0, 2)[0] != (-1, -1):
            return None
    except Exception:  # noqa: BLE001 - missing, or a release whose internals moved: re gives the same answers
        return None

    def compile_(pattern: str):
        try:
            return re2.compile(pattern, options)._regexp
        except re2.error:
            return None
    return compile_, anchor


_ENGINE: list = []


def engine():
    """google-re2's (compile, anchor), or None; imported on first use (~20 ms: only when a long line comes)."""
    if not _ENGINE:
        _ENGINE.append(_engine())
    return _ENGINE[0]


def _unbounded(items) -> bool:
    """Whether a parsed pattern repeats anything without bound (`*`, `+`, `{n,}`). Without one, each attempt
    of `re`'s search is bounded by the pattern, so the search is linear in the line: no need for RE2."""
    for op, arg in items:
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)):
            if arg[1] == _sre.MAXREPEAT or _unbounded(arg[2]):
                return True
        elif op == _sre.SUBPATTERN:
            if _unbounded(arg[-1]):
                return True
        elif op == _sre.BRANCH:
            if any(_unbounded(b) for b in arg[1]):
                return True
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            if _unbounded(arg[1]):
                return True
        elif op == getattr(_sre, "ATOMIC_GROUP", None) and _unbounded(arg):
            return True
    return False


def _bounded(pattern: str) -> bool:
    try:
        return not _unbounded(list(_sre_parse.parse(pattern)))
    except Exception:  # noqa: BLE001 - an internal parser that changed shape: treat as unbounded (RE2 if it can)
        return False


def _lead(py: re.Pattern) -> re.Pattern | None:
    """The literal `py` starts with, compiled with `py`'s flags, when a run of any characters but a newline
    (`[^\\n]*`, `.*` without DOTALL, greedy or lazy) follows it; None otherwise."""
    try:
        parsed = list(_sre_parse.parse(py.pattern, py.flags & ~re.UNICODE))
    except Exception:  # noqa: BLE001 - an internal parser that changed shape: plain search, same answers
        return None
    lead = []
    for i, (op, arg) in enumerate(parsed):
        if op == _sre.LITERAL:
            lead.append(chr(arg))
            continue
        if not lead or op not in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) or arg[0] != 0 or arg[1] != _sre.MAXREPEAT:
            return None
        item = list(arg[2])
        any_but_nl = item == [(_sre.NOT_LITERAL, 10)] or (item == [(_sre.ANY, None)] and not py.flags & re.DOTALL)
        return re.compile(re.escape("".join(lead)), py.flags) if any_but_nl else None
    return None


class LinePattern:
    """A compiled pattern searched in one line: `search(text)` -> re's match, or None. Which engine a long
    line goes to is settled on the first long line (most patterns never see one: start-up stays cheap)."""

    __slots__ = ("pattern", "py", "_re2", "_anchor", "_lead", "_ready")

    def __init__(self, pattern: str | re.Pattern):
        self.py = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
        self.pattern = self.py.pattern
        self._re2 = self._lead = None
        self._ready = False

    def _prepare(self) -> None:
        self._ready = True
        eng = engine()
        if (eng is not None and not self.py.flags & (re.VERBOSE | re.ASCII | re.LOCALE) and isinstance(self.pattern, str)
                and not _bounded(self.pattern)):  # a bounded pattern is linear on re, whose call is cheaper
            spelled = _to_re2(self.pattern)
            self._re2 = eng[0](spelled) if spelled is not None else None
            self._anchor = eng[1]
        self._lead = _lead(self.py)  # also for a line RE2 does not take (not ASCII)

    @property
    def re2(self):
        if not self._ready:
            self._prepare()
        return self._re2

    @property
    def engine(self) -> str:
        return ("re2" if self.re2 is not None else "re, first literal" if self._lead is not None
                else "re, bounded" if _bounded(self.pattern) else "re")

    def search(self, text: str):
        if len(text) <= SHORT or "\n" in text:
            return self.py.search(text)
        if not self._ready:
            self._prepare()
        if self._re2 is not None and text.isascii():
            b = text.encode("ascii")
            start = self._re2.Match(self._anchor, b, 0, len(b))[0][0]
            return None if start < 0 else self.py.match(text, start)
        if self._lead is not None:
            first = self._lead.search(text)
            return None if first is None else self.py.match(text, first.start())
        return self.py.search(text)


# What a line must hold for a pattern to match in it, checked with `bytes in` before the pattern runs (matcher.py):
# a catalog trigger is often a bare gate word (`error`, `fail`, `.py", line `) that 40 patterns share, so every
# exception line and traceback frame ran them all (issue 23: 1.4 MB/s on a log of tracebacks). `needs(pattern)` is a
# condition in disjunctive form: a tuple of terms, each a tuple of lowercase ASCII literals; a line the pattern
# matches in holds, lowercased, every literal of at least one term. Derived from the parsed pattern: a run of
# literal characters is needed where it stands at the top of a sequence, in a group, or in a repeat of at least one;
# an alternation needs one of its branches' terms. Case: a literal in a case-sensitive part is in the line as is, so
# in its ASCII lowercasing; under IGNORECASE Python's `re` also matches U+0130/U+0131 for i, U+212A for k and U+017F
# for s (its case folding, `re._casefix`): those letters end a run there (tests/test_linear_engine.py re-derives the
# set from every code point). Anything else ends a run; dropping a piece only weakens the condition, never wrongly.
MAX_TERMS = 16
_FOLDS_OUTSIDE_ASCII = frozenset("iks")
TRUE: tuple = ((),)   # no condition
_DNF: dict = {}       # (pattern, flags) -> its terms before `implied` (a pattern is shared by several modes)
_I = int(re.IGNORECASE)


def _product(a: list, b: list) -> list:
    if len(a) * len(b) > MAX_TERMS:
        return a   # too many terms: keep the condition so far (weaker, still necessary)
    return [x | y for x in a for y in b]


def _needs_seq(items, flags: int) -> list:
    out = [frozenset()]
    run: list[str] = []

    def flush():
        nonlocal out
        if run:
            out = _product(out, [frozenset(["".join(run)])])
            run.clear()
    for op, arg in items:
        if op == _sre.LITERAL:
            c = chr(arg)
            if c.isascii() and not (flags & _I and c.lower() in _FOLDS_OUTSIDE_ASCII):
                run.append(c.lower())
                continue
            flush()
            continue
        flush()
        sub = None
        if op == _sre.SUBPATTERN:
            _, add, drop, p = arg
            sub = _needs_seq(p, (flags | int(add)) & ~int(drop))
        elif op == getattr(_sre, "ATOMIC_GROUP", None):
            sub = _needs_seq(arg, flags)
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)) and arg[0] >= 1:
            sub = _needs_seq(arg[2], flags)
        elif op == _sre.BRANCH:
            branches = [_needs_seq(b, flags) for b in arg[1]]
            if not any(frozenset() in b for b in branches):   # every branch needs something
                sub = [t for b in branches for t in b]
                if len(sub) > MAX_TERMS:
                    sub = None
        if sub is not None and frozenset() not in sub:
            out = _product(out, sub)
    flush()
    return out


# characters common in log lines: a term's literals made only of them are checked last (a cheap order, not a rule),
# and one of them alone is not worth a check (nearly every line holds it)
_COMMON = set(" .:/[]-_=,()'\"\t0123456789abcdefghijklmnopqrstuvwxyz")


def needs(pattern: re.Pattern, implied: tuple[str, ...] = ()) -> tuple[tuple[str, ...], ...]:
    """The literals a line must hold (lowercased) for `pattern` to match in it: at least one term's all; TRUE (one
    empty term) when nothing is known. `implied`: literals the caller already found in the line (dropped from the
    terms). Each term's literals are ordered to fail fast: long and uncommon first."""
    key = (pattern.pattern, pattern.flags)
    dnf = _DNF.get(key)
    if dnf is None:
        try:
            parsed = _sre_parse.parse(pattern.pattern, pattern.flags & ~re.UNICODE)
            dnf = _DNF[key] = _needs_seq(list(parsed), int(pattern.flags | parsed.state.flags))
        except Exception:  # noqa: BLE001 - an internal parser that changed shape: no condition (the regex decides)
            return TRUE
    terms = []
    for t in dnf:
        lits = {x for x in t if not any(x in i for i in implied) and not (len(x) == 1 and x in _COMMON)}
        lits = {x for x in lits if not any(x != y and x in y for y in lits)}   # a piece of another literal: redundant
        if not lits:
            return TRUE
        terms.append(tuple(sorted(lits, key=lambda x: (set(x) <= _COMMON, -len(x), x))))
    return tuple(dict.fromkeys(terms)) or TRUE
