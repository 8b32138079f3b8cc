"""Judge a set of rank dumps: per process group, the first collective where ranks diverge.

Keyed on (process group id, collective sequence id) only. Every rank numbers the collectives of a group
1, 2, 3... in call order, so the same sequence id on two ranks is the same collective when the program is
right; a rank that lacks it never entered it (the origin of a hang), a rank that has it with another op or
shape called something else. States are used only to tell "all entered, none completed" on NCCL: Gloo dumps
(torch 2.13) leave every entry "scheduled", which is why torch's own fr_trace analyzer misjudges them.
The ring buffer (TORCH_FR_BUFFER_SIZE) drops the oldest entries, so only sequence ids that every rank's
buffer still covers are compared.
"""
from __future__ import annotations

from ddpdoctor.flightrec.entries import MAX_DIMS, _shape_list, entry
from ddpdoctor.flightrec.model import Divergence, OpVariant, PGVerdict, RankDump
from ddpdoctor.units import fmt_ranks


def _expected(dumps: list[RankDump]) -> tuple:
    worlds = [d.world for d in dumps if d.world]
    return tuple(sorted(max(worlds, key=len))) if worlds else ()


def _small(v, kind) -> bool:
    """A list as torch writes one for an entry: at most 8 shapes of ints (or dtype strings)."""
    if type(v) is not list or len(v) > 8:
        return False
    if kind is str:
        return all(type(x) is str for x in v)
    return all(type(s) is list and len(s) <= MAX_DIMS and all(type(x) is int for x in s) for s in v)


class _Sig:
    """What ranks must agree on at one sequence id: (profiling name, input shapes, dtypes).

    Small values (every real entry) are compared raw with == (C speed); Entries are built only where
    ranks differ. Anything larger is reduced once per distinct object to a number: a dump can share
    one huge list among all its entries through pickle memo references, and comparing it anew at
    every sequence id would cost its size times the number of ids.
    """

    def __init__(self):
        self._by_id: dict = {}
        self._canon: dict = {}

    def _key(self, v, kind):
        if v is None or _small(v, kind):
            return v
        k = self._by_id.get(id(v))
        if k is None:
            val = (tuple(x if type(x) is str else "?" for x in v) if isinstance(v, (list, tuple)) else ()) \
                if kind is str else _shape_list(v)
            k = self._by_id[id(v)] = ("big", self._canon.setdefault(val, len(self._canon)))
        return k

    def __call__(self, e: dict) -> tuple[tuple, bool]:
        """(the signature, whether it is the raw values): a raw signature of small values bounds the
        cost of comparing any other entry's raw values with it (== stops at the smaller side)."""
        name = e.get("profiling_name")
        sizes, dtypes = e.get("input_sizes"), e.get("input_dtypes")
        ks, kd = self._key(sizes, int), self._key(dtypes, str)
        return (name if type(name) is str else None, ks, kd), (ks is sizes and kd is dtypes and type(name) is str)


def _pg_verdict(pg: str, desc: str, per_rank: dict[int, dict[int, dict]], backend: str,
                _sig: _Sig | None = None) -> PGVerdict:
    _sig = _sig or _Sig()
    ranks = sorted(per_rank)
    last = {r: (max(s) if s else 0) for r, s in per_rank.items()}
    # compare only where every buffer still reaches: the oldest entry kept on the rank that kept the least
    floor = max((min(s) for s in per_rank.values() if s), default=1)
    top = max(last.values(), default=0)
    names: dict = {}
    tables = [per_rank[r] for r in ranks]
    # only the ids some rank recorded: an id no rank has decides nothing, and a dump can hold ids
    # 1 and 10**15 (walking every id between would never end)
    seqs = sorted({s for t in tables for s in t if floor <= s <= top})
    for seq in seqs:
        first, raw = None, False
        same = True
        for t in tables:
            e = t.get(seq)
            if e is None:
                same = False
                break
            if first is None:
                first, raw = _sig(e)  # validated once per id; the other ranks compare raw against it
                continue
            other = (e.get("profiling_name"), e.get("input_sizes"), e.get("input_dtypes")) if raw else _sig(e)[0]
            if other != first:
                same = False
                break
        if same:
            continue
        present = {r: per_rank[r].get(seq) for r in ranks}
        have = [r for r, e in present.items() if e is not None]
        lack = [r for r, e in present.items() if e is None]
        groups: dict[tuple, list[int]] = {}
        for r in have:
            e = entry(present[r], names)
            if e is None:
                continue
            groups.setdefault((e.op, e.input_sizes, e.dtypes), []).append(r)
        variants = tuple(OpVariant(op=k[0], input_sizes=k[1], dtypes=k[2], ranks=tuple(v))
                         for k, v in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0])))
        if not variants:
            continue
        main = variants[0]
        if len(variants) > 1:
            others = "; ".join(f"rank{'s' if len(v.ranks) > 1 else ''} {_rl(v.ranks)} called {v.op}"
                               f"{_sz(v.input_sizes)}" for v in variants[1:])
            note = f"ranks called different collectives at #{seq}: {others}"
            status = "mismatch"
        else:
            note = ""
            status = "diverged"
        return PGVerdict(pg=pg, pg_desc=desc, status=status, seq=seq, op=main.op,
                         input_sizes=main.input_sizes, not_entered=tuple(lack), waiting=tuple(have),
                         variants=variants, last_seq=last, note=note)
    if top == 0:
        return PGVerdict(pg=pg, pg_desc=desc, status="unknown", seq=None, last_seq=last,
                         note="no collective recorded")
    entries = [entry(per_rank[r][top], names) for r in ranks]
    entries = [e for e in entries if e is not None]
    op, sizes = (entries[0].op, entries[0].input_sizes) if entries else ("", ())
    if backend == "nccl" and entries and all(e.state in ("scheduled", "started") for e in entries):
        return PGVerdict(pg=pg, pg_desc=desc, status="stuck", seq=top, op=op, input_sizes=sizes,
                         waiting=tuple(ranks), last_seq=last,
                         note="every dumped rank entered it and none completed it: look at the ranks without a "
                              "dump, the network, or a GPU kernel that never finished")
    return PGVerdict(pg=pg, pg_desc=desc, status="consistent", seq=top, op=op, input_sizes=sizes,
                     waiting=(), last_seq=last,
                     note="every dumped rank recorded the same collectives" +
                          ("" if backend == "nccl" else " (Gloo records no completion: whether the last one "
                                                        "finished is unknown)"))


def analyze(dumps: list[RankDump], skipped: list[str] | tuple = ()) -> Divergence:
    """The verdict over a job's dumps (from load_dir). Pure: no I/O."""
    expected = _expected(dumps)
    have = tuple(sorted(d.rank for d in dumps))
    missing = tuple(r for r in expected if r not in have)
    backends = {d.backend for d in dumps if d.backend}
    backend = backends.pop() if len(backends) == 1 else ("mixed" if backends else "")
    # pg id -> rank -> seq -> Entry (collectives only; p2p ops have their own numbering)
    table: dict[str, dict[int, dict[int, dict]]] = {}
    desc: dict[str, str] = {}
    for d in dumps:
        for pg, seqs in d.collectives.items():
            table.setdefault(pg, {})[d.rank] = seqs
            if pg not in desc and seqs:
                pgt = next(iter(seqs.values())).get("process_group")
                if isinstance(pgt, (list, tuple)) and len(pgt) > 1 and pgt[1] and type(pgt[1]) is str:
                    desc[pg] = pgt[1][:200]
    verdicts = []
    sig = _Sig()  # one for all groups: the objects it has reduced live as long as the dumps
    for pg in sorted(table, key=lambda p: (len(p), p)):
        per_rank = table[pg]
        # a rank of the group with an empty buffer for it never entered any of its collectives
        for d in dumps:
            if d.rank not in per_rank and _member(d, pg, desc.get(pg, "")):
                per_rank[d.rank] = {}
        verdicts.append(_pg_verdict(pg, desc.get(pg, ""), per_rank, backend, sig))
    order = {"mismatch": 0, "diverged": 1, "stuck": 2, "consistent": 3, "unknown": 4}
    verdicts.sort(key=lambda v: (order[v.status], v.seq if v.seq is not None else 0))
    notes = list(skipped)
    if missing:
        notes.append(f"no dump from rank{'s' if len(missing) > 1 else ''} {_rl(missing)}: partial verdict "
                     f"(a rank that died or hung before dumping writes none)")
    return Divergence(ranks=have, expected=expected, missing=missing, backend=backend, groups=tuple(verdicts),
                      notes=tuple(notes))


def _member(d: RankDump, pg: str, desc: str) -> bool:
    # the default group holds everyone; for others trust the rank's own pg_status (it lists its groups)
    return pg == "0" or desc == "default_pg" or pg in d.pg_status


def _rl(ranks) -> str:
    """Ranks as ranges: 0-3,5."""
    return fmt_ranks(ranks, sep=",")


def _sz(sizes) -> str:
    return "" if not sizes else " " + "x".join(",".join(map(str, s)) or "scalar" for s in sizes).join("[]")
