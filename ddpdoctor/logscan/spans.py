"""The lines of a block that hold a gate word, and which gate words each holds (matcher.py's `_scan_block`): from the
Aho-Corasick passes, with the gate words of a short line looked up by its bytes (a log of tracebacks repeats its frame
lines: the overlapping pass over each runs once while it is in the bounded cache), or from the memmem passes. Split
from matcher.py (module size)."""
from __future__ import annotations

import heapq
from typing import Any, Protocol

from ddpdoctor.logscan.nextline import _line_end


class Matcher(Protocol):
    """What line_spans reads of matcher.Matcher (a structural type: matcher.py imports this module, not the reverse)."""
    _ac: Any
    _gate_list: Any
    _gates_of: Any

    def _all_gate_hits(self, low: bytes) -> list[tuple[int, int, int, bytes]]: ...

# A line longer than this is looked at only around its hits (matcher.MAX_WINDOW, re-exported there).
MAX_WINDOW = 8192
# the gate words of lines up to GATES_LINE bytes are kept by the line's bytes, GATES_SIZE lines at most (~1 MB)
GATES_LINE = 1024
GATES_SIZE = 1024


def from_hits(hits) -> list[tuple[int, int, set[bytes]]]:
    """(start, end, gates) per line start of `hits` ((line start, line end, hit, gate), matcher._all_gate_hits), in
    order of start: a line's gates together, its end the furthest of its hits' ends (an overlong line's windows)."""
    spans: dict[int, tuple[int, set[bytes]]] = {}
    for start, end, _pos, gate in hits:
        entry = spans.get(start)
        if entry is None:
            spans[start] = (end, {gate})
        else:
            entry[1].add(gate)
            if end > entry[0]:
                spans[start] = (end, entry[1])
    return [(s, *spans[s]) for s in sorted(spans)]


def line_spans(m: Matcher, low: bytes) -> list[tuple[int, int, frozenset[bytes] | set[bytes]]]:
    """What from_hits(m._all_gate_hits(low)) returns. With the automatons: per line that the leftmost-first pass finds,
    the set of gate words an overlapping pass over it finds (on a line of at most MAX_WINDOW bytes every hit of a gate
    has the line's span, so the line's gates are the distinct gates found in it); an overlong line goes through the
    per-hit windows of matcher._ac_gate_hits."""
    if m._ac is None:
        return from_hits(m._all_gate_hits(low))
    gates, n = m._gate_list, len(low)
    firsts, every = m._ac
    known = m._gates_of
    out: list = []
    done = 0
    starts = ([pos for _, pos, _ in firsts[0].find_matches_as_indexes(low)] if len(firsts) == 1 else
              # one C sort of the groups' sorted runs (timsort merges them): heapq.merge costs Python time per hit
              sorted([pos for f in firsts for _, pos, _ in f.find_matches_as_indexes(low)]))
    cr = b"\r" in low   # most blocks have none: then a line ends only at LF
    for pos in starts:
        if pos < done:
            continue
        start = low.rfind(b"\n", 0, pos) + 1
        if cr:
            start = low.rfind(b"\r", start, pos) + 1 or start  # a bare CR (progress bars) also ends a line
            end = _line_end(low, pos, n)
        else:
            end = low.find(b"\n", pos)
            if end == -1:
                end = n
        done = end
        if end - start > MAX_WINDOW:
            out += from_hits(_windows(low, start, end, every, gates))
            continue
        line = low[start:end]
        found = known.get(line) if end - start <= GATES_LINE else None
        if found is None:
            found = frozenset([gates[g] for g, _, _ in every.find_matches_as_indexes(line, overlapping=True)])
            if end - start <= GATES_LINE:
                if len(known) >= GATES_SIZE:
                    known.clear()
                known[line] = found
        if found:
            out.append((start, end, found))
    return out


def _windows(low: bytes, line_start: int, line_end: int, every, gates) -> list[tuple[int, int, int, bytes]]:
    """matcher._ac_gate_hits's hits for one overlong line: each gate's occurrences a memmem pass stops at (the first
    at or after the end of its previous hit's window), each with the window of MAX_WINDOW bytes around it."""
    out = []
    resume: dict[int, int] = {}
    for g, hit, _ in every.find_matches_as_indexes(memoryview(low)[line_start:line_end], overlapping=True):
        hit += line_start
        if hit < resume.get(g, 0):
            continue
        start = max(line_start, hit - MAX_WINDOW // 2)
        end = min(line_end, hit + MAX_WINDOW // 2)
        out.append((start, end, hit, gates[g]))
        resume[g] = end
    return out


def gate_hits(find, low: bytes, gates: list[bytes]) -> list[tuple[int, int, int, bytes]]:
    """(line start, line end, hit, gate) for every hit of `gates` in `low`; one memmem pass a gate."""
    n = len(low)
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


def ac_gate_hits(ac, gates: list[bytes], low: bytes) -> list[tuple[int, int, int, bytes]]:
    """What gate_hits returns (up to order), from Aho-Corasick passes. A leftmost-first pass over the
    block finds the lines holding any gate word (an occurrence it skips overlaps one it reports, and no
    gate word spans a line end, so that one is in the same line); only those lines get the overlapping
    pass, where each gate keeps the occurrences a memmem pass would stop at: the first at or after the
    end of its previous hit (lines are independent: a hit's end never passes its line's end)."""
    n = len(low)
    firsts, every = ac
    view = memoryview(low)
    out = []
    done = 0
    starts = ([pos for _, pos, _ in firsts[0].find_matches_as_indexes(low)] if len(firsts) == 1 else
              # one C sort of the groups' sorted runs (timsort merges them): heapq.merge costs Python time per hit
              sorted([pos for f in firsts for _, pos, _ in f.find_matches_as_indexes(low)]))
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
