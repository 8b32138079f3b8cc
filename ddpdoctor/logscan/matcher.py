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

import heapq

import os
import re
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator

from ddpdoctor.catalog.model import GATES, FailureMode, Signature
from ddpdoctor.logscan.facts import FACTS, Fact
from ddpdoctor.logscan.gatefind import FIND, Finder, _automaton, _bytes_find, trigger_bytes, widen
from ddpdoctor.logscan.linear import LinePattern
from ddpdoctor.logscan.reader import CHUNK, blocks

MAX_TEXT = 2000     # characters of a line kept as evidence and searched by the regexes
MAX_WINDOW = 8192   # bytes around a hit taken from an overlong line

# Prefixes that launchers and log collectors put in front of each line: pdsh/clush `host: `, Slurm
# `srun -l` task numbers `3: `, mpirun `[1,3]<stderr>:`, torchrun `[rank3]:` and `--tee`
# `[<role><local rank>]:` (`[default3]:`, `[trainer3]:` with --role; elastic/multiprocessing/api.py), and Ray's
# `(RayTrainWorker pid=123, ip=10.0.0.5) `.
_PREFIX = re.compile(
    r"^(?:"
    # what a person skips before reading a line: a quote marker (`> `, GitHub comments), a timestamp a log
    # collector put first (`2024-12-04T07:19:22.472Z `, `[2026-04-22 21:34:20] `), a bare process number
    # (`[80746] `), accelerate's `stderr: ` and torchx's `trainer/0 [1]:`
    r">+ ?|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\]?[ \t]+|\[\d+\] (?=\S)|std(?:out|err): |"
    r"[\w-]+/\d+ \[(?P<torchx>\d+)\]:\s?|"
    # Open MPI's `mpirun --timestamp-output` (orte/mca/iof/base: ctime() without its newline, glued to the tag
    # "%s[%s,%s]<%s>:" with --tag-output, "%s<%s>:" without): the time goes, the tag is read below
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d \d{4}"
    r"(?:<std(?:out|err|diag)>:\s?|(?=\[\d+,\d+\]<std))|"
    r"(?P<label>[A-Za-z0-9][A-Za-z0-9_.-]{0,62}): "
    r"|\[\d+,(?P<mpi>\d+)\]<std(?:out|err)>:\s?"
    r"|\[rank(?P<rank>\d+)\]:\s?"
    r"|\[[A-Za-z_][\w-]*?(?P<local>\d+)\]:\s?"
    r"|\(\w+ pid=\d+(?:, ip=(?P<ip>[\d.]+))?\)\s"
    r")"
)
# (a shared library's name is the dynamic loader's prefix, dlerror(3): `libtorch_cuda.so: undefined symbol: ...`)
_NOT_HOST = re.compile(r"(?i)(?:error|exception|warning|warn|info|debug|traceback|critical|fatal|notice)$|\.py$|"
                       r"\.so(?:\.\d+)*$")
# NCCL's debug prefix (src/debug.cc ncclDebugLog, src/misc/utils.cc before 2.5): "%s:%d:%d [%d] NCCL INFO ", and for
# WARN the file and line too, "%s:%d:%d [%d] %s:%d NCCL WARN " (v2.4.8 .. v2.29), "... %s:%d (%s) NCCL WARN " with the
# function (v2.30.7)
_NCCL_ORIGIN = re.compile(r"^(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                          r"(?:[\w./-]+:\d+ (?:\([^()\s]*\) )?)?NCCL ")
_MSG_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (?P<r1>\d+)\]|(?<![\w-])rank[:=] ?(?P<r2>\d+)\b|\bon rank:? (?P<r3>\d+)")


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


@dataclass
class LineMatch:
    line: int
    text: str            # the whole line, trimmed to MAX_TEXT characters
    host: str | None
    rank: int | None
    matches: list[tuple[Rule, dict]]


def split_origin(text: str) -> tuple[str, str | None, int | None]:
    """(body, host, rank) of a log line: strips collector prefixes and reads who wrote the line."""
    host = rank = None
    body = _unmarked(text)
    for _ in range(6):
        m = _PREFIX.match(body)
        if not m:
            break
        label = m.group("label")
        if label is not None:
            if label.isdecimal():  # not isdigit(): int() refuses "²"
                rank = int(label) if rank is None else rank  # srun -l task number
            elif _NOT_HOST.search(label) or not any(c.isdigit() or c in "-." for c in label):
                break  # `RuntimeError: ...`, `INFO: ...`, `main.py: error: ...` are messages, not hosts
            elif host is None:
                host = label
        elif m.group("mpi") is not None:
            rank = int(m.group("mpi"))
        elif m.group("rank") is not None:
            rank = int(m.group("rank"))
        elif m.group("local") is not None:
            rank = int(m.group("local")) if rank is None else rank
        elif m.group("ip") is not None and host is None:
            host = m.group("ip")
        elif m.group("torchx") is not None:
            rank = int(m.group("torchx")) if rank is None else rank
        body = body[m.end():]
    m = _NCCL_ORIGIN.match(body)
    if m and host is None:
        host = m.group("host")
    if rank is None:
        m = _MSG_RANK.search(body)
        if m:
            rank = int(next(g for g in m.groups() if g is not None))
    return body, host, rank


def _unmarked(text: str) -> str:
    """The line as a person reads a log pasted into Markdown (GitHub issues, forums): bold markers (`**`) that the
    poster put around the words that matter, and the backticks that quote a line, removed. Neither is ever part of
    what the code printed in a way a signature reads (a `**kwargs` in a traceback's source line reads the same
    without them)."""
    if "**" in text:
        text = text.replace("**", "")
    if text[:1] == "`" or text[-1:] == "`":
        text = text.strip("`")
    return text


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
        find, n = self.find, len(low)
        out = []
        for gate in gates:
            pos = find(low, gate, 0)
            while pos != -1:
                nl = low.rfind(b"\n", 0, pos) + 1
                start = low.rfind(b"\r", nl, pos) + 1 or nl  # a bare CR (progress bars) also ends a line
                end = _line_end(low, pos, n)
                if end - start > MAX_WINDOW:  # an overlong line: look only around the hit
                    start = max(start, pos - MAX_WINDOW // 2)
                    end = min(end, pos + MAX_WINDOW // 2)
                out.append((start, end, pos, gate))
                pos = find(low, gate, end)
        return out

    def _ac_gate_hits(self, low: bytes) -> list[tuple[int, int, int, bytes]]:
        """What `_gate_hits` returns (up to order), from Aho-Corasick passes. A leftmost-first pass over the
        block finds the lines holding any gate word (an occurrence it skips overlaps one it reports, and no
        gate word spans a line end, so that one is in the same line); only those lines get the overlapping
        pass, where each gate keeps the occurrences a memmem pass would stop at: the first at or after the
        end of its previous hit (lines are independent: a hit's end never passes its line's end)."""
        gates, n = self._gate_list, len(low)
        firsts, every = self._ac
        view = memoryview(low)
        out = []
        done = 0
        starts = ([pos for _, pos, _ in firsts[0].find_matches_as_indexes(low)] if len(firsts) == 1 else
                  heapq.merge(*([pos for _, pos, _ in f.find_matches_as_indexes(low)] for f in firsts)))
        for pos in starts:
            if pos < done:
                continue
            nl = low.rfind(b"\n", 0, pos) + 1
            line_start = low.rfind(b"\r", nl, pos) + 1 or nl  # a bare CR (progress bars) also ends a line
            line_end = _line_end(low, pos, n)
            resume: dict[int, int] = {}
            for g, hit, _ in every.find_matches_as_indexes(view[line_start:line_end], overlapping=True):
                hit += line_start
                if hit < resume.get(g, 0):
                    continue
                start, end = line_start, line_end
                if end - start > MAX_WINDOW:  # an overlong line: look only around the hit
                    start = max(start, hit - MAX_WINDOW // 2)
                    end = min(end, hit + MAX_WINDOW // 2)
                out.append((start, end, hit, gates[g]))
                resume[g] = end
            done = line_end
        return out

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
        spans: dict[int, tuple[int, set[bytes]]] = {}  # line start -> (line end, gates hit)
        for start, end, _pos, gate in self._all_gate_hits(low):
            entry = spans.get(start)
            if entry is None:
                spans[start] = (end, {gate})
            else:
                entry[1].add(gate)
                if end > entry[0]:
                    spans[start] = (end, entry[1])
        if not spans:
            return
        line = first_line
        counted = 0
        skipped: list[tuple[int, int, int, dict]] = []   # (line, start, end, rules) not searched: all saturated
        matched: dict[int, int] = {}                       # rule index -> last line of this block it matched
        for start in sorted(spans):
            end, gates = spans[start]
            segment = low[start:end]
            if b"**" in segment:  # Markdown bold a poster put in a pasted log: the words, not the markers (_unmarked)
                segment = segment.replace(b"**", b"")
            hits: dict[int, Rule] = {}
            for gate in gates:
                for trigger, rules in self.gates[gate].items():
                    if trigger in segment:
                        for rule in rules:
                            hits[rule.index] = rule
            if not hits:
                continue
            line += data.count(b"\n", counted, start)
            counted = start
            if saturated and hits.keys() <= saturated and not _two_lines(data, low, start, end):
                skipped.append((line, start, end, hits))
                continue
            lm = self._search_line(data, low, start, end, line, gates, segment, hits.values())
            if lm is not None:
                for rule, _ in lm.matches:
                    matched[rule.index] = line
                yield lm
        if skipped:
            yield from self._last_of_saturated(data, skipped, matched)

    def _search_line(self, data, low, start, end, line, gates, segment, rules) -> LineMatch | None:
        text = data[start:end].decode("utf-8", "replace").replace("\x00", "")
        text = text.strip("\r\n")[:MAX_TEXT]
        body, host, rank = split_origin(text)
        found = []
        for rule in rules:
            m = rule.regex.search(body)
            if m:
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                if rule.fact is not None and rule.fact.follow:
                    groups["after"] = _following(data, end, rule.fact.follow)
                found.append((rule, groups))
        if not any(r.failure is not None for r, _ in found):
            found += self._wrapped(data, low, start, end, gates, body, segment)
        return LineMatch(line, text, host, rank, found) if found else None

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

    def _wrapped(self, data: bytes, low: bytes, start: int, end: int, gates, body: str, segment: bytes) -> list:
        """A message a terminal or a poster wrapped in two lines, as a person reads it: when no catalog
        signature matched this line alone, the ones that match it with the next line joined on (only when
        the next line reads as the rest of this one, and the match needs both lines)."""
        two = _two_lines(data, low, start, end)
        if not two:
            return []
        rules = {r.index: r for g in gates for t, rs in self.gates[g].items() if t in two for r in rs
                 if r.failure is not None}
        if not rules:
            return []
        joined = _joined(data, end, body)
        first = len(body.rstrip())
        nxt = two[len(low[start:end].rstrip()) + 1:]
        out = []
        for rule in rules.values():
            m = rule.regex.search(joined) if joined else None
            # the match needs both lines, or lies in the next line whose trigger word only this line holds (a
            # library's `Failed: CUDA error <file>:<line>` wrapped before its quoted `'peer access is not ...'`): the
            # next line alone is never searched for it, so this is the only reading that finds it
            if m and first < m.end() and (m.start() < first or not any(t in nxt for t in rule.triggers)):
                out.append((rule, {k: v for k, v in m.groupdict().items() if v is not None}))
        return out


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


def _line_end(low: bytes, pos: int, n: int) -> int:
    nl = low.find(b"\n", pos)
    if nl == -1:
        nl = n
    cr = low.find(b"\r", pos, nl)
    return nl if cr == -1 else cr


# a wrapped message goes on mid-sentence: in lowercase, or mid-number (a terminal cuts `NumelOut=1|29280`), or with
# the quote that opens its quoted part (`'peer access is not supported ...'`)
_CONTINUES = re.compile(rb"[ \t]*['\"`]?[a-z0-9(]")


def _two_lines(data: bytes, low: bytes, start: int, end: int) -> bytes:
    """The lowercased line at start:end and the next one joined by a space, when the next line reads as the
    rest of this one (it goes on in lowercase, as a terminal or a poster wraps a sentence); else b""."""
    if end >= len(low) - 1 or not _CONTINUES.match(data, end + 1):
        return b""
    nxt_end = low.find(b"\n", end + 1)
    nxt = low[end + 1:nxt_end if nxt_end != -1 else len(low)][:MAX_TEXT].strip()
    return low[start:end].rstrip() + b" " + nxt if nxt else b""


def _joined(data: bytes, end: int, body: str) -> str:
    """`body` and the line after it as one line (the next line's prefixes and indent dropped), or "" when
    there is no next line in this block or it is empty: how a person reads a message wrapped in two."""
    if end >= len(data):
        return ""
    nxt_end = data.find(b"\n", end + 1)
    nxt = data[end + 1:nxt_end if nxt_end != -1 else len(data)][:MAX_TEXT]
    if not nxt.strip():
        return ""
    text = split_origin(nxt.decode("utf-8", "replace").strip("\r\n"))[0].strip()
    return f"{body.rstrip()} {text}" if text else ""


def _following(data: bytes, end: int, n: int, width: int = 300) -> str:
    """The `n` lines after the line ending at `end` (in this block), each cut to `width` characters."""
    out = []
    pos = end + 1
    while len(out) < n and pos < len(data):
        nl = data.find(b"\n", pos)
        nl = len(data) if nl == -1 else nl
        out.append(data[pos:min(nl, pos + width)].decode("utf-8", "replace").strip("\r"))
        pos = nl + 1
    return "\n".join(out)
