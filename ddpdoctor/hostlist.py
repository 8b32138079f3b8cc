"""Slurm hostlist expressions (`gpu[01-04,07],login1`), through the maintained python-hostlist.

Slurm's own grammar has corners (zero padding, several bracket groups, `a[1-2]-b[3-4]`) that a
hand-written parser gets wrong; python-hostlist (https://www.nsc.liu.se/~kent/python-hostlist/)
follows it, and `collect` writes the compact form `srun --exclude=` accepts.
"""
from __future__ import annotations

from typing import Iterable

from ddpdoctor.validate import BadInput


def expand(expr: str) -> list[str]:
    """`node[1-3],login1` -> ['node1', 'node2', 'node3', 'login1'] (Slurm's order, duplicates dropped)."""
    import hostlist  # python-hostlist; imported here so `ddpdoctor prolog` without a nodelist never needs it

    try:
        names = hostlist.expand_hostlist(expr.strip())
    except hostlist.BadHostlist as e:
        raise BadInput(f"bad Slurm hostlist {expr!r}: {e}") from None
    out: list[str] = []
    for n in names:
        if n not in out:
            out.append(n)
    return out


def collect(names: Iterable[str]) -> str:
    """['node1', 'node2', 'node3'] -> 'node[1-3]' ('' for no names)."""
    import hostlist

    names = [n for n in names if n]
    return hostlist.collect_hostlist(names) if names else ""


def first(expr: str) -> str | None:
    names = expand(expr)
    return names[0] if names else None
