"""Find the lines of a log that match catalog signatures or facts, fast enough for 200 MB logs.

Running ~150 regular expressions on every line of a 200 MB log would take minutes in Python, and one
big alternation is no faster in `re`. Instead every pattern has a lowercase literal `trigger` that
each matching line contains, and every trigger contains one of a few short *gate* words. A block
of the log is lowercased once; `bytes.find` (C speed) locates the gate words; only the lines
around those hits are decoded and tested, first against the triggers of that gate, then against
the regexes whose trigger is present. Everything else is never looked at in Python.

Where the C library has memmem (glibc, musl, macOS) the gate words are found with it through
ctypes: it is several times faster than bytes.find for this job (SIMD), and the gate passes are
most of the cost. DDPDOCTOR_NO_MEMMEM=1 forces bytes.find; tests check both agree. A ctypes call
releases the GIL, so on a block of 1 MiB or more the gate words are split over a small thread pool
(one per CPU, at most 4): 108 -> 181 MB/s on 2 cores (best of 5, 50 MB). DDPDOCTOR_SCAN_THREADS=1
keeps one thread; tests check both find the same lines.

Where ahocorasick_rs (a Rust Aho-Corasick automaton, docs/dependencies.md) is installed, all gate words
are found by Aho-Corasick instead of one memmem pass each (~64): a leftmost-first pass over the lowercased
block finds the lines holding any gate word, an overlapping pass over each such line every occurrence,
from which each gate keeps the hits the memmem passes find (its next hit is searched from the end of its
previous hit's line). The scan: ~55 -> ~250 MB/s of CPU in-process (50 MB log, one thread). DDPDOCTOR_NO_AHOCORASICK=1 forces the memmem passes; tests check
both give the same hits.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator

from ddpdoctor.catalog.model import GATES, FailureMode, Signature
from ddpdoctor.logscan.facts import FACTS, Fact
from ddpdoctor.logscan.gatefind import FIND, Finder, _automaton, _bytes_find, trigger_bytes, widen
from ddpdoctor.logscan.linear import TRUE, LinePattern, needs
from ddpdoctor.logscan.needed import Row, all_of_one, holds
from ddpdoctor.logscan.needed import probe as probe_
from ddpdoctor.logscan.nextline import MAX_TEXT, _following, _joined, _line_end, _two_lines  # noqa: F401 - tests
# re-exported: tests and ranker.py read them here
from ddpdoctor.logscan.origin import _MSG_RANK, _NCCL_ORIGIN, _NOT_HOST, _PREFIX, _unmarked, split_origin  # noqa: F401
from ddpdoctor.logscan.reader import CHUNK, blocks
from ddpdoctor.logscan.spans import MAX_WINDOW, ac_gate_hits, gate_hits, line_spans  # noqa: F401 - tests

@dataclass(frozen=True)
class Rule:
    """A compiled signature or fact."""
    index: int
    failure: FailureMode | None
    signature: Signature | None
    fact: Fact | None
    regex: LinePattern  # re or RE2, the same answers, linear in the line (linear.py)
    triggers: tuple[bytes, ...]


@dataclass
class ScanStats:
    bytes: int = 0
    lines: int = 0


@dataclass(slots=True)   # one per matched line: cheaper to make and to read
class LineMatch:
    line: int
    text: str            # the whole line, trimmed to MAX_TEXT characters
    host: str | None
    rank: int | None
    matches: list[tuple[Rule, dict]]


class Matcher:
    def __init__(self, failures: dict[str, FailureMode], facts: tuple[Fact, ...] = FACTS, *,
                 find: Finder | None = None, multi: bool = True):
        self.find = find or FIND
        rules: list[Rule] = []
        for fm in failures.values():
            for sig in fm.signatures:
                rules.append(Rule(len(rules), fm, sig, None, LinePattern(sig.regex), trigger_bytes(sig.triggers, sig.pattern)))
        for fact in facts:
            rules.append(Rule(len(rules), None, None, fact, LinePattern(fact.pattern),
                              trigger_bytes(fact.triggers, fact.pattern)))
        self.rules = rules
        # gate word -> trigger -> rules. A trigger with no gate word in it becomes a gate of its own
        # (correct, one more pass over the log; tests/test_catalog.py keeps that from happening).
        grouped: dict[bytes, dict[bytes, list[Rule]]] = {}
        for rule in rules:
            for trigger in rule.triggers:
                gate = next((g.encode() for g in GATES if g.encode() in trigger), trigger)
                grouped.setdefault(gate, {}).setdefault(trigger, []).append(rule)
        # Widen each gate to the longest piece all its triggers share ("signal" -> ") received by
        # pid"): glibc's memmem skips up to len(needle)-1 bytes per step, so a pass with a longer
        # needle is cheaper, and the gate passes are most of the scan (profiled: 90% of the time).
        self.gates: dict[bytes, dict[bytes, list[Rule]]] = {}
        for gate, by_trigger in grouped.items():
            wide = self.gates.setdefault(widen(gate, list(by_trigger)), {})
            for trigger, trigger_rules in by_trigger.items():
                wide.setdefault(trigger, []).extend(trigger_rules)
        # longest first: memmem skips faster with a longer needle, so the threads' shares even out
        self._gate_list = sorted(self.gates, key=len)
        self._ac = _automaton(self._gate_list) if multi else None  # multi=False: the memmem passes
        # Per gate, per trigger: each rule with what else a line must hold for its pattern to match (linear.needs;
        # the trigger itself is known present), None when nothing more is known; built for a gate when a line first
        # holds it (_gate_checks: start-up stays as cheap as before).
        self._multi = multi
        self._checks: dict[bytes, list] = {}
        self._trigger_auto: dict[bytes, object] = {}
        self._need: dict[int, tuple | None] = {}   # for a wrapped line (_wrapped): nothing taken as present
        # answers that are functions of a line's bytes (_rules_for, _search_line, _wrapped), bounded: cleared when full
        self._hits: dict[bytes, tuple] = {}
        self._lines: dict[bytes, tuple] = {}
        self._pairs: dict[bytes, list] = {}
        self._whole: dict[bytes, tuple] = {}   # a line with the next one -> all its matches (_search_line)
        self._gates_of: dict[bytes, frozenset] = {}   # spans.line_spans: a short line's gate words

    def _gate_checks(self, gate: bytes) -> list:
        """A _Row per trigger of `gate`, in the gate's order, and one automaton of them all for a gate of many."""
        rows = [Row(self, trigger, rules) for trigger, rules in self.gates[gate].items()]
        auto = _automaton([r.trigger for r in rows]) if self._multi and len(rows) >= 8 else None
        if auto is not None:
            self._trigger_auto[gate] = auto[1]
        self._checks[gate] = rows
        return rows

    def scan(self, stream: BinaryIO, stats: ScanStats | None = None, *, chunk: int = CHUNK,
             progress: Callable[[int], None] | None = None, saturated: frozenset | set = frozenset()) -> Iterator[LineMatch]:
        """Every line with at least one matching rule, in order; `stats` receives bytes and lines read.

        `saturated`: indexes of rules (kept up to date by the caller, evidence.Collector) for which one more
        matching line can only move the last line it matched. A line whose rules are all saturated (and that
        no wrapped message continues) is not decoded nor searched; at the end of its block, the block's last
        such line each saturated rule matches is yielded with that rule alone, so the caller sees every rule's
        last line as before. A log where every line matches then costs its gate pass, not a search per line
        (issue 21)."""
        stats = stats if stats is not None else ScanStats()
        last = b"\n"
        for block in blocks(stream, chunk):
            yield from self._scan_block(block.data, block.first_line, saturated)
            stats.bytes += block.size
            stats.lines += block.newlines
            last = block.data[-1:] or last
            if progress:
                progress(stats.bytes)
        if last != b"\n":
            stats.lines += 1  # a last line without a newline still counts

    def _gate_hits(self, low: bytes, gates: list[bytes]) -> list[tuple[int, int, int, bytes]]:
        """(line start, line end, hit, gate) for every hit of `gates` in `low`; one memmem pass a gate."""
        return gate_hits(self.find, low, gates)

    def _ac_gate_hits(self, low: bytes) -> list[tuple[int, int, int, bytes]]:
        """What `_gate_hits` returns (up to order), from Aho-Corasick passes (spans.ac_gate_hits)."""
        return ac_gate_hits(self._ac, self._gate_list, low)

    def _all_gate_hits(self, low: bytes) -> list[tuple[int, int, int, bytes]]:
        """The gate passes are most of the scan's cost, and memmem through ctypes runs without the
        GIL: on a big block, split the gates over the pool's threads (one pass each, as before)."""
        gates = self._gate_list
        if self._ac is not None:
            return self._ac_gate_hits(low)
        pool = _pool() if self.find is not _bytes_find and len(low) >= PARALLEL_MIN else None
        if pool is None:
            return self._gate_hits(low, gates)
        k = _POOL_SIZE
        parts = [gates[i::k] for i in range(k)]
        futures = [pool.submit(self._gate_hits, low, part) for part in parts[1:]]
        out = self._gate_hits(low, parts[0])
        for f in futures:
            out += f.result()
        return out

    def _scan_block(self, data: bytes, first_line: int, saturated=frozenset()) -> Iterator[LineMatch]:
        low = data.lower()
        spans = line_spans(self, low)
        if not spans:
            return
        line = first_line
        counted = 0
        skipped: list[tuple[int, int, int, dict]] = []   # (line, start, end, rules) not searched: all saturated
        matched: dict[int, int] = {}                       # rule index -> last line of this block it matched
        for start, end, gates in spans:
            raw = segment = low[start:end]
            known = self._hits.get(raw) if end - start <= CACHE_LINE else None
            if known is None:
                if b"**" in segment:  # Markdown bold a poster put in a pasted log: the words, not the markers
                    segment = segment.replace(b"**", b"")   # (_unmarked); only _rules_for reads `segment`
                hits, ruled_out = self._rules_for(low, start, end, gates, segment)
                # with the indexes of all the rules its triggers name (the saturated check below)
                known = (hits, ruled_out, frozenset(hits).union([r.index for r in ruled_out]))
                if end - start <= CACHE_LINE:
                    if len(self._hits) >= CACHE_SIZE:
                        self._hits.clear()
                    self._hits[raw] = known
            hits, ruled_out, named = known
            if not hits and not ruled_out:
                continue
            line += data.count(b"\n", counted, start)
            counted = start
            two = None   # _two_lines, once a branch needed it
            # skipped as saturated exactly when it was before the needs checks: by all the rules its triggers name
            if saturated and named <= saturated and not (two := _two_lines(data, low, start, end)):
                if hits:
                    skipped.append((line, start, end, hits))
                continue
            if not hits and not (two if two is not None else (two := _two_lines(data, low, start, end))):
                continue   # no rule can match this line alone, and none joined with the next (_wrapped)
            if end - start <= CACHE_LINE:   # _search_line's look-up of the line with the next one, here (per line)
                nxt = data.find(b"\n", end + 1, start + 2 * CACHE_LINE + 1)   # _pair_end, inline (per line)
                if nxt == -1 and len(data) <= start + 2 * CACHE_LINE:
                    nxt = len(data)
                known = self._whole.get(data[start:nxt]) if nxt != -1 else None
                if known is not None:
                    text, host, rank, found = known
                    if found:
                        for rule, _ in found:
                            matched[rule.index] = line
                        yield LineMatch(line, text, host, rank, [(r, dict(g)) for r, g in found])
                    continue
            lm = self._search_line(data, low, start, end, line, gates, segment, hits.values(), two)
            if lm is not None:
                for rule, _ in lm.matches:
                    matched[rule.index] = line
                yield lm
        if skipped:
            yield from self._last_of_saturated(data, skipped, matched)

    def _rules_for(self, low, start, end, gates, segment) -> tuple[dict[int, Rule], list[Rule]]:
        """The rules whose trigger the line holds and what else their pattern needs (by index), and those whose
        trigger it holds but not the rest (linear.needs): a function of the line's bytes (cached by _scan_block)."""
        hits: dict[int, Rule] = {}
        ruled_out: list[Rule] = []
        probe = None
        for gate in gates:
            rows = self._checks.get(gate)
            if rows is None:
                rows = self._gate_checks(gate)
            found = self._trigger_auto.get(gate)
            if found is not None:   # one pass for the gate's many triggers (`error`: 56): only the rows present
                present = found.find_matches_as_indexes(segment, overlapping=True)
                rows = [rows[k] for k in sorted({k for k, _, _ in present})]
            for row in rows:
                if found is not None or row.trigger in segment:
                    checks, many = row.checks, row.many
                    if checks is None:
                        row.seen += 1
                        if row.seen < BUILD_AFTER:   # a few lines: every rule of the trigger searched, as before
                            for rule in row.rules:
                                hits[rule.index] = rule
                            continue
                        checks, many = row.build()
                    if probe is None:
                        probe = probe_(low, start, end, segment)
                    if many is not None:
                        # one Aho-Corasick pass finds which of the row's literals the line holds; only the needs
                        # that start with one of them can hold (the others: ruled out, in the row's order)
                        auto, starts, terms, always, needful = many
                        present = {i for i, _, _ in auto.find_matches_as_indexes(probe, overlapping=True)}
                        passed = {k for i in present for k in starts.get(i, ()) if all_of_one(terms[k], present)}
                        if not passed:   # the common case: only the rules that need nothing more
                            for rule in always:
                                hits[rule.index] = rule
                            ruled_out += needful
                            continue
                        for k, (need, rules) in enumerate(checks):
                            if need is None or k in passed:
                                for rule in rules:
                                    hits[rule.index] = rule
                            else:
                                ruled_out += rules
                        continue
                    for need, rules in checks:
                        if need is not None and not holds(need, probe):
                            ruled_out += rules
                            continue
                        for rule in rules:
                            hits[rule.index] = rule
        # in rule order, not in the order the line's gate words came out of a set of bytes (hash-seed order): which
        # of two tied rules a diagnosis names as its basis must not change from one run to the next
        return dict(sorted(hits.items())), ruled_out

    def _search_line(self, data, low, start, end, line, gates, segment, rules, two=None) -> LineMatch | None:
        """The line's matches: its own (decoded, who wrote it, the rules' groups), then what reads the next line
        (a fact's `follow`, a message wrapped in two: _wrapped). From _scan_block (`low` given) the line's own are a
        function of its bytes, and so are the rules searched (_rules_for): a log that repeats lines (every rank
        printing the same traceback) decodes and searches each distinct line once while it is in the bounded cache.
        So are all its matches, given the next line too (the most a `follow` of one line and _wrapped read; a line
        ends at its first CR or LF, so the line and the rest are told apart in the key): a traceback's frame line with
        its source line under it is looked up whole."""
        whole = None
        if low and end - start <= CACHE_LINE:
            nxt = _pair_end(data, start, end)
            whole = data[start:nxt] if nxt != -1 else None
            known = self._whole.get(whole) if whole is not None else None
            if known is not None:
                text, host, rank, found = known
                return LineMatch(line, text, host, rank, [(r, dict(g)) for r, g in found]) if found else None
            key = data[start:end]
            own = self._lines.get(key)
            if own is None:
                own = self._own(data, start, end, rules)
                if len(self._lines) >= CACHE_SIZE:
                    self._lines.clear()
                self._lines[key] = own
        else:
            own = self._own(data, start, end, rules)
        text, body, host, rank, local, wraps = own
        found = []
        for rule, groups in local:
            groups = dict(groups)
            if rule.fact is not None and rule.fact.follow:
                groups["after"] = _following(data, end, rule.fact.follow)
            found.append((rule, groups))
        if wraps:
            found += self._wrapped(data, low, start, end, gates, body, segment, two)
        if whole is not None and \
                all(r.fact is None or r.fact.follow <= 1 for r, _ in local):   # (a follow of more: not in the key)
            if len(self._whole) >= CACHE_SIZE:
                self._whole.clear()
            self._whole[whole] = (text, host, rank, [(r, dict(g)) for r, g in found])
        return LineMatch(line, text, host, rank, found) if found else None

    def _own(self, data, start, end, rules) -> tuple:
        """(text, body, host, rank, [(rule, groups)], no catalog signature matched) of the line alone."""
        text = data[start:end].decode("utf-8", "replace").replace("\x00", "")
        text = text.strip("\r\n")[:MAX_TEXT]
        body, host, rank = split_origin(text)
        local = []
        seen: dict[str, object] = {}   # several modes share a pattern (catalog/shared.toml): search it once
        for rule in rules:
            pattern = rule.regex.pattern
            m = seen.get(pattern, _UNSEEN)
            if m is _UNSEEN:
                m = seen[pattern] = rule.regex.search(body)
            if m:
                local.append((rule, {k: v for k, v in m.groupdict().items() if v is not None}))
        return text, body, host, rank, local, not any(r.failure is not None for r, _ in local)

    def _last_of_saturated(self, data, skipped, matched) -> Iterator[LineMatch]:
        """For each saturated rule, the last skipped line of the block it matches, when later than the last
        line of the block it matched among the lines searched; each such line with those rules alone, in order."""
        pending = {i for _, _, _, hits in skipped for i, r in hits.items() if r.failure is not None}
        found: dict[int, LineMatch] = {}
        for line, start, end, hits in reversed(skipped):
            want = [r for i, r in hits.items() if i in pending and matched.get(i, -1) < line]
            if not want:
                continue
            lm = self._search_line(data, b"", start, end, line, (), b"", want)
            for rule, _ in lm.matches if lm is not None else ():
                pending.discard(rule.index)
            if lm is not None:
                found[line] = lm
            pending -= {i for i in pending if matched.get(i, -1) >= line}
            if not pending:
                break
        yield from (found[k] for k in sorted(found))

    def _wrapped(self, data: bytes, low: bytes, start: int, end: int, gates, body: str, segment: bytes,
                 two: bytes | None = None) -> list:
        """A message a terminal or a poster wrapped in two lines, as a person reads it: when no catalog
        signature matched this line alone, the ones that match it with the next line joined on (only when
        the next line reads as the rest of this one, and the match needs both lines). `two`: _two_lines when known."""
        if two is None:
            two = _two_lines(data, low, start, end)
        if not two:
            return []
        nxt = data.find(b"\n", end + 1)
        key = data[start:len(data) if nxt == -1 else nxt]
        if len(key) > CACHE_LINE:
            return self._wrapped_new(data, start, end, gates, body, two, low)
        known = self._pairs.get(key)
        if known is None:   # a function of the two lines' bytes (both lines are in the key)
            if len(self._pairs) >= CACHE_SIZE:
                self._pairs.clear()
            known = self._pairs[key] = self._wrapped_new(data, start, end, gates, body, two, low)
        return [(rule, dict(groups)) for rule, groups in known]

    def _wrapped_new(self, data: bytes, start: int, end: int, gates, body: str, two: bytes, low: bytes) -> list:
        rules = {r.index: r for g in sorted(gates) for t, rs in self.gates[g].items() if t in two for r in rs
                 if r.failure is not None}   # sorted: the same order in every run (hash-seed order otherwise)
        if not rules:
            return []
        joined = _joined(data, end, body)
        if not joined:
            return []
        probe = joined.lower()   # a literal in `joined` is in its lowercasing (linear.needs)
        first = len(body.rstrip())
        nxt = two[len(low[start:end].rstrip()) + 1:]
        out = []
        for rule in rules.values():
            need = self._need.get(rule.index, _UNSEEN)
            if need is _UNSEEN:
                need = self._need[rule.index] = None if (n := needs(rule.regex.py)) == TRUE else n
            if need is not None and not holds(need, probe):
                continue
            m = rule.regex.search(joined)
            # the match needs both lines, or lies in the next line whose trigger word only this line holds (a
            # library's `Failed: CUDA error <file>:<line>` wrapped before its quoted `'peer access is not ...'`): the
            # next line alone is never searched for it, so this is the only reading that finds it
            if m and first < m.end() and (m.start() < first or not any(t in nxt for t in rule.triggers)):
                out.append((rule, {k: v for k, v in m.groupdict().items() if v is not None}))
        return out


_UNSEEN = object()


def _pair_end(data: bytes, start: int, end: int) -> int:
    """Where the line after the one at start:end ends (the key of Matcher._whole is data[start:that]), or -1 when the
    two are longer than 2 * CACHE_LINE bytes (never kept: the look-up would cost a long slice)."""
    lim = start + 2 * CACHE_LINE
    nxt = data.find(b"\n", end + 1, lim + 1)
    if nxt == -1 and len(data) <= lim:
        return len(data)   # no line end after it in the block
    return nxt


# A trigger's needs are derived (~0.3 ms a pattern: the regex parser) once this many lines held it: a short log
# searches every rule of the trigger, as before, and a log of tracebacks pays the derivation once.
BUILD_AFTER = 64


# The per-line caches: lines up to CACHE_LINE bytes (with the next line, for _search_line), CACHE_SIZE of each at
# most (~2 x 2048 x 1 KB: constant memory whatever the log).
CACHE_LINE = 1024
CACHE_SIZE = 2048


# Blocks at least this big scan their gate words on _POOL_SIZE threads (memmem releases the GIL).
PARALLEL_MIN = 1 << 20
_POOL_SIZE = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)))
_POOL: list = []


def _pool():
    """A small thread pool for the gate passes, made on first use; None on a single CPU."""
    if _POOL_SIZE < 2 or os.environ.get("DDPDOCTOR_SCAN_THREADS") == "1":
        return None
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor
        _POOL.append(ThreadPoolExecutor(_POOL_SIZE - 1, thread_name_prefix="ddpdoctor-scan"))
    return _POOL[0]
