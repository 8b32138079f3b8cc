"""The gate words of the log scan (matcher.py): their finders, libc memmem through ctypes (or bytes.find) and
the Aho-Corasick automatons (ahocorasick_rs) that replace them where installed, and the widening of a gate word
to what all its triggers share. Split from matcher.py to keep each module small; the why of each is in
matcher.py's docstring and docs/dependencies.md."""
from __future__ import annotations

import os
import sys
from typing import Callable

Finder = Callable[[bytes, bytes, int], int]


def _bytes_find(data: bytes, needle: bytes, start: int) -> int:
    return data.find(needle, start)


def _memmem_finder() -> Finder | None:
    """`find(data, needle, start)` backed by libc memmem, or None where it is unavailable."""
    if os.environ.get("DDPDOCTOR_NO_MEMMEM") or sys.platform.startswith("win"):
        return None
    try:
        import ctypes

        memmem = ctypes.CDLL(None).memmem
    except (OSError, AttributeError, TypeError):
        return None
    memmem.restype = ctypes.c_void_p
    memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    c_char_p, c_void_p, cast = ctypes.c_char_p, ctypes.c_void_p, ctypes.cast

    def find(data: bytes, needle: bytes, start: int) -> int:
        n = len(data)
        if start >= n:
            return -1
        ref = c_char_p(data)  # points into the bytes object itself (no copy); kept alive by `ref`
        base = cast(ref, c_void_p).value
        hit = memmem(base + start, n - start, needle, len(needle))
        return -1 if not hit else hit - base

    if find(b"xxabcxx", b"abc", 0) != 2 or find(b"abcabc", b"abc", 1) != 3 or find(b"abc", b"zz", 0) != -1:
        return None  # not the memmem we expect
    return find


FIND: Finder = _memmem_finder() or _bytes_find


def _automaton(gates: list[bytes]):
    """Automatons for all gate words: leftmost-first (fast, finds the lines) and standard (overlapping
    matches, within those lines), or None where
    ahocorasick_rs is missing or DDPDOCTOR_NO_AHOCORASICK=1: the memmem passes then give the same hits."""
    if os.environ.get("DDPDOCTOR_NO_AHOCORASICK"):
        return None
    try:
        import ahocorasick_rs
    except ImportError:
        return None
    kind = ahocorasick_rs.MatchKind
    firsts = tuple(ahocorasick_rs.BytesAhoCorasick(group, matchkind=kind.LeftmostFirst) for group in groups(gates))
    return firsts, ahocorasick_rs.BytesAhoCorasick(gates, matchkind=kind.Standard)


# The aho-corasick crate (1.1.3 in ahocorasick_rs 1.0.3) searches with its SIMD Teddy prefilter only up to 64 patterns
# (src/packed/teddy/builder.rs: "Too many patterns will overwhelm Teddy"); past that its automaton steps through every
# byte: 65 gate words in one automaton cost 1.6x the gate pass of 64, 128 words 5x (benchmarks/bench_gates.py).
TEDDY_MAX = 64


def groups(gates: list[bytes], size: int = TEDDY_MAX) -> list[list[bytes]]:
    """`gates` (sorted by length) dealt round-robin into the fewest groups of at most `size`, of even sizes, one
    line-finding automaton (one pass over the block) each. Even sizes, not 64 and the rest: a small group whose words
    start with at most 2 distinct bytes gets the crate's start-byte prefilter instead of Teddy (src/util/prefilter.rs:
    Teddy only when a group of <= 16 has >= 3 start bytes), a memchr that stops at every 't' or 'w': the two longest
    gates alone cost 360 ms a 100 MB log, the one longest 9 ms, so 64 + 3 words cost 3x the pass of 64, while 34 + 33
    cost less than 64 in one (bench_gates.py). Round-robin mixes lengths and first bytes in every group."""
    k = max(1, -(-len(gates) // size))
    return [gates[i::k] for i in range(k)]


def literal_finder(needle: bytes) -> Callable[[bytes], bool]:
    """`has(data)`: whether `data` holds `needle`, by an ahocorasick_rs automaton where available (SIMD, ~20x faster
    than memmem or `in` for a short needle: measured 0.2 vs 4 ms a 4 MiB block), else by FIND."""
    auto = _automaton([needle])
    if auto is None:
        return lambda data: FIND(data, needle, 0) != -1
    first = auto[0][0]
    return lambda data: bool(first.find_matches_as_indexes(data))


def widen(gate: bytes, triggers: list[bytes]) -> bytes:
    """The longest substring of every trigger that contains `gate` (so it is no commoner than `gate`): the gate
    pass then stops on fewer lines that no rule behind it can match."""
    shortest = min(triggers, key=len)
    best = gate
    for i in range(len(shortest)):
        for j in range(len(shortest), i + len(best), -1):
            piece = shortest[i:j]
            if gate in piece and all(piece in t for t in triggers):
                best = piece
                break
    return best


def trigger_bytes(triggers: tuple[str, ...], pattern: str) -> tuple[bytes, ...]:
    """A pattern's literal triggers as the lowercased bytes the gate pass looks for; a pattern without one is a
    catalog error (it would have to run on every line)."""
    if not triggers or not all(triggers):
        raise ValueError(f"pattern {pattern!r} has no literal trigger; give one explicitly")
    return tuple(t.lower().encode() for t in triggers)
