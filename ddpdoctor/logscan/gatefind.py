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
    # The line-finding pass runs one automaton per TEDDY_MAX gates: the aho-corasick crate keeps its SIMD
    # (Teddy) prefilter only up to 64 patterns, and one gate more made that pass 3-4x slower (issue 23);
    # two passes of <= 64 cost ~1.2x one. The overlapping pass runs on hit lines only: one automaton.
    firsts = tuple(ahocorasick_rs.BytesAhoCorasick(gates[i:i + TEDDY_MAX], matchkind=kind.LeftmostFirst)
                   for i in range(0, len(gates), TEDDY_MAX))
    return firsts, ahocorasick_rs.BytesAhoCorasick(gates, matchkind=kind.Standard)


TEDDY_MAX = 64


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
