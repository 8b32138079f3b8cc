"""Sizes: one parser and the byte formatters every command shares (and the rank-range formatter).

Binary units throughout (K/M/G/T are powers of 1024), as nccl-tests' `-e 64M` and Slurm's
`--mem=64G` read them.
"""
from __future__ import annotations

import re
from typing import Iterable

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
_UNITS = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": TiB}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?")


def parse_size(text: str) -> int:
    """`"64M"`, `"64MiB"`, `"1.5g"`, `"4096"` -> bytes; ValueError for anything else, OverflowError
    past 2**63 (config values and CLI sizes must fit the int64 torch and Slurm use)."""
    m = _SIZE.fullmatch(str(text).strip().lower())
    if not m:
        raise ValueError(f"{text!r} is not a size")
    v = float(m.group(1)) * _UNITS[m.group(2)]
    if not v < 2 ** 63:  # also inf ("1e999" cannot match, but 400 digits can): int(inf) raises
        raise OverflowError(f"{text!r} is too large")
    return int(v)


def human_size(n: int | None) -> str:
    """Bytes to the largest unit, one decimal under 10: `1.5 GiB`, `64 MiB`; None is `unlimited`."""
    if n is None:
        return "unlimited"
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v >= 10 or v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


def fmt_bytes(n: int) -> str:
    """A message size as the user typed it: exact units where it divides (`64 MiB`), else one decimal."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= KiB:
        return f"{n / KiB:.1f} KiB"
    return f"{n} B"


def fmt_ranks(ranks: Iterable[int], sep: str = ", ") -> str:
    """[0, 1, 2, 5] -> '0-2, 5' (sep="," gives the compact '0-2,5' the flight-recorder verdicts use)."""
    rs = sorted(set(ranks))
    parts, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return sep.join(parts)
