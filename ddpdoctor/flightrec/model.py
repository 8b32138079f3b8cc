"""The data shapes of flight-recorder analysis: the stable API that `inspect` and `explain --fr` share.

All frozen dataclasses of plain values, so a verdict can be turned into JSON with `dataclasses.asdict`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ddpdoctor.flightrec.entries import entry, index


class BadDump(ValueError):
    """A dump (or a directory of dumps) that cannot be read: one line, meant for the user."""


@dataclass(frozen=True)
class RankDump:
    """One rank's dump file, parsed."""
    rank: int
    path: str
    backend: str                  # "nccl", "gloo", or "" when no entry says
    version: str                  # the dump format version ("2.10")
    comm_lib_version: str
    pg_ranks: dict                # pg id -> tuple of global ranks in it (from pg_config; may be empty)
    pg_status: dict               # pg id -> {"last_enqueued_collective": n, "last_completed_collective": n, ...}
    raw_entries: tuple = field(default=(), repr=False, compare=False)  # torch's entry dicts, in record order

    # Entries are built on demand: 64 ranks x 2000 entries is 128k objects, and a verdict needs only a few.
    @cached_property
    def entries(self) -> tuple:
        """tuple[Entry], in record order (entries that are not well-formed are left out)."""
        names: dict = {}
        return tuple(x for x in (entry(e, names) for e in self.raw_entries) if x is not None)

    @cached_property
    def collectives(self) -> dict:
        """pg id (str) -> collective seq id -> torch's entry dict; p2p ops left out (they number apart)."""
        return index(self.raw_entries)

    @property
    def world(self) -> tuple:
        """The ranks of the largest group this dump knows of (the default group), or () when unknown."""
        return max(self.pg_ranks.values(), key=len, default=())


@dataclass(frozen=True)
class OpVariant:
    """One distinct (op, sizes, dtypes) seen at a sequence id, and the ranks that recorded it."""
    op: str
    input_sizes: tuple
    dtypes: tuple
    ranks: tuple


@dataclass(frozen=True)
class PGVerdict:
    """What the dumps show for one process group.

    `seq` is the first collective sequence id where the ranks diverge (or, when they do not, the last one all
    reached); `not_entered` the ranks that never recorded it (the origin of a hang), `waiting` those that did
    and wait in it (victims); `variants` has more than one element when ranks called different ops or shapes
    at `seq`. `status` is one of "diverged", "mismatch", "stuck" (all entered, not completed: NCCL only),
    "consistent", "unknown".
    """
    pg: str
    pg_desc: str
    status: str
    seq: int | None
    op: str = ""
    input_sizes: tuple = ()
    not_entered: tuple = ()
    waiting: tuple = ()
    variants: tuple = ()          # tuple[OpVariant]
    last_seq: dict = field(default_factory=dict)  # rank -> last seq recorded in this pg
    note: str = ""


@dataclass(frozen=True)
class Divergence:
    """The verdict over all dumps: per process group, plus what was missing."""
    ranks: tuple                  # ranks whose dumps were read
    expected: tuple               # ranks the dumps say exist (from pg_config), () when unknown
    missing: tuple                # expected ranks with no dump: the verdict is partial when not empty
    backend: str
    groups: tuple                 # tuple[PGVerdict], diverged groups first
    notes: tuple = ()

    @property
    def partial(self) -> bool:
        return bool(self.missing)

    @property
    def first(self) -> PGVerdict | None:
        """The most telling group verdict (a divergence before a mere stuck/consistent one)."""
        return self.groups[0] if self.groups else None
