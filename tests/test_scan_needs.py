"""The log scan's cheap checks before a regex (linear.needs) and its per-line caches (matcher.py) change no answer:
a line a pattern matches always holds what `needs` says it must, on every line of the logs we tune on and on
case and Unicode variants of each pattern's example; the scan with its caches finds the same lines, rules and
groups as without them, on logs that repeat lines the way tracebacks do; the caches stay bounded."""
from __future__ import annotations

import io
import re
from pathlib import Path

from ddpdoctor import catalog
from ddpdoctor.logscan import linear, spans
from ddpdoctor.logscan import matcher as M
from ddpdoctor.logscan.linear import TRUE, needs
from ddpdoctor.logscan.matcher import Matcher, split_origin
from ddpdoctor.logscan.needed import holds as _holds

ROOT = Path(__file__).resolve().parent.parent
MATCHER = Matcher(catalog.failures())


def _tuned_on_lines() -> list[str]:
    """Every line of tests/logs and the dev split of the corpus (never the held-out split)."""
    paths = sorted((ROOT / "tests" / "logs").glob("*/*.log")) + sorted((ROOT / "tests" / "corpus" / "dev").glob("*.log"))
    out = []
    for path in paths:
        for raw in path.read_bytes().split(b"\n"):
            out.append(split_origin(raw.decode("utf-8", "replace").replace("\x00", "").strip("\r")[:2000])[0])
    return out


def _variants(s: str) -> list[str]:
    """`s` in other cases, and with the non-ASCII letters Python's re folds onto i, k and s under IGNORECASE."""
    return [s, s.upper(), s.lower(), s.swapcase(), s.replace("k", "\u212a").replace("K", "\u212a"),
            s.replace("s", "\u017f").replace("S", "\u017f"), s.replace("i", "\u0131").replace("I", "\u0130")]


def _need_bytes(need):
    return None if need == TRUE else tuple(tuple(x.encode() for x in t) for t in need)


def test_the_letters_re_folds_outside_ascii_are_the_ones_needs_leaves_out():
    every = "".join(chr(c) for c in range(128, 0x110000) if not 0xD800 <= c < 0xE000)
    folds = {c.lower() for c in map(chr, range(128)) if re.search("(?i)" + re.escape(c), every)}
    assert folds == set(linear._FOLDS_OUTSIDE_ASCII)


def test_a_line_a_pattern_matches_holds_what_the_pattern_needs():
    lines = _tuned_on_lines()
    checked = 0
    for rule in MATCHER.rules:
        need = _need_bytes(needs(rule.regex.py))
        if need is None:
            continue
        example = (rule.signature.example if rule.signature else rule.fact.example) or ""
        candidates = [s for s in lines if any(t.decode() in s.lower() for t in rule.triggers)]
        for s in candidates + _variants(example):
            if rule.regex.py.search(s):
                checked += 1
                # the scan checks the line's bytes, lowercased as bytes.lower does (ASCII only)
                assert _holds(need, s.encode("utf-8", "surrogatepass").lower()), (rule.regex.pattern, s, need)
    assert checked > 1000


def test_needs_of_shared_trigger_patterns_are_their_own_words():
    # `error` is the trigger of 40 patterns: an exception line of the job's code runs only those it could match
    rx = re.compile(r"(?i)unhandled system error|ncclSystemError")
    need = needs(rx, ("error",))
    assert len(need) == 2 and all(any("unhandled" in x or "nccl" in x for x in t) for t in need)
    line = b"[rank3]: valueerror: bad value 17"
    m = Matcher(catalog.failures())
    hits, ruled_out = m._rules_for(line, 0, len(line), {b"error"}, line)
    assert not ruled_out   # the first lines of a log: every rule of the trigger, as before (BUILD_AFTER)
    for _ in range(M.BUILD_AFTER):
        hits, ruled_out = m._rules_for(line, 0, len(line), {b"error"}, line)
    assert len(ruled_out) >= 25 and len(hits) <= 4
    assert any(r.fact is not None and r.fact.name == "exception" for r in hits.values())


def _traceback_log() -> bytes:
    """Tracebacks as a job with 8 ranks prints them, with dev-corpus logs between: lines repeat, pairs repeat."""
    dev = sorted((ROOT / "tests" / "corpus" / "dev").glob("*.log"))[:60]
    parts = []
    for i, path in enumerate(dev):
        r = i % 8
        parts.append(path.read_bytes())
        parts.append("".join(
            f'[rank{r}]: Traceback (most recent call last):\n[rank{r}]:   File "/home/u/train.py", line {10 + i % 3}, '
            f'in <module>\n[rank{r}]:     main()\n[rank{r}]:   File "C:\\work\\run.py", line 5, in main\n'
            f"[rank{r}]:     dist.init_process_group(\n"
            f"[rank{r}]: RuntimeError: The server socket has failed to listen on any local\n"
            # the same line wrapped before the rest of its message (c10d's, MASTER_PORT_IN_USE), or followed by another
            f"{('network address.', 'call failed')[(i + k) % 2]}\n"
            # a frame line whose source line under it differs, or ends in a CR (the whole-line cache's key)
            f'[rank{r}]:   File "/home/u/train.py", line 7, in step\n[rank{r}]:     {("loss.backward()", "opt.step()")[k % 2]}'
            f'{chr(13) if k == 2 else ""}\n'
            for k in range(3)).encode())
    return b"\n".join(parts)


def _scan(m: Matcher, data: bytes, chunk: int) -> list:
    return [(lm.line, lm.text, lm.host, lm.rank, [(r.index, g) for r, g in lm.matches])
            for lm in m.scan(io.BytesIO(data), chunk=chunk)]


def test_the_scan_with_its_caches_and_needs_finds_what_it_finds_without(monkeypatch):
    data = _traceback_log()
    monkeypatch.setattr(M, "BUILD_AFTER", 1)   # the needs checked from the first line on
    cached = [_scan(Matcher(catalog.failures()), data, chunk) for chunk in (4096, 1 << 22)]
    monkeypatch.setattr(M, "BUILD_AFTER", 1 << 40)   # never: every rule whose trigger the line holds is searched
    monkeypatch.setattr(M, "CACHE_LINE", -1)   # nothing is short enough to be cached
    monkeypatch.setattr(spans, "GATES_LINE", -1)
    fresh = Matcher(catalog.failures())
    plain = [_scan(fresh, data, chunk) for chunk in (4096, 1 << 22)]
    assert not fresh._lines and not fresh._pairs and not fresh._hits and not fresh._whole and not fresh._gates_of
    assert cached == plain
    assert sum(len(lm[4]) for lm in plain[1]) > 500
    wrapped = [lm for lm in plain[1] if "failed to listen" in lm[1] and len(lm[4]) > 1]
    assert 50 <= len(wrapped) < sum("failed to listen" in lm[1] for lm in plain[1])


def test_the_per_line_caches_stay_bounded(monkeypatch):
    monkeypatch.setattr(M, "CACHE_SIZE", 50)
    m = Matcher(catalog.failures())
    data = "".join(f'  File "/home/u/m{i}.py", line {i}, in f{i}\n    x = f(y)\nValueError: bad {i}\n'
                   for i in range(3000)).encode()
    found = _scan(m, data, 1 << 16)
    assert len(found) == 6000
    assert 0 < len(m._lines) <= 50 and 0 < len(m._hits) <= 50 and len(m._pairs) <= 50 and 0 < len(m._whole) <= 50
    assert 0 < len(m._gates_of) <= spans.GATES_SIZE
