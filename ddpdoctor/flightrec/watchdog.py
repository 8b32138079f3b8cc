"""The NCCL watchdog's per-rank progress lines: which ranks never entered the stuck collective.

ProcessGroupNCCL.cpp prints, per process group and rank, the last enqueued and last completed work sequence
ids. Wordings seen across torch versions (all matched on their stable part, `last enqueued ... work: E,
last completed ... work: C`):

  2.1-2.3  [Rank 5] Exception detected by watchdog at work: 18421, last enqueued NCCL work: 18421, last completed NCCL work: 18420.
  2.4-2.6  [PG 0 (default_pg) Rank 1] Timeout at NCCL work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.
           [PG ID 2 PG GUID 3 Rank 3] Exception (either an error or timeout) detected by watchdog at work: 32, last enqueued NCCL work: 32, ...
  2.7+     [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 5 PG status: last enqueued work: 5, last completed work: 4
  all      ... Received a dump signal due to a collective timeout from rank 7 ... Last enqueued NCCL work: 56116, last completed NCCL work: 56116.
           ... NCCL Work update periodically: last enqueued NCCL work: E, last completed NCCL work: C.
  and      [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1048576, ...)

The rank in a `[PG ... Rank r]` prefix is the rank within that group; torchrun's `[rankN]:` prefix is the global
rank. A rank whose last enqueued id is below the stuck collective never entered it (the origin); ranks that
enqueued it wait in it (victims). Reads text only; nothing here imports torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# numbers bounded to 18 digits: int64 ids, and int() of a 5000-digit run raises
_PREFIX = re.compile(r"\[(?:PG (?:ID )?(?P<pg>\d{1,18})(?: PG GUID (?P<guid>[^\s(\]]{1,64}))?\s*(?:\((?P<desc>[^)]{0,200})\))?\s+)?"
                     r"Rank (?P<rank>\d{1,18})\]")
_GLOBAL = re.compile(r"\[(?:rank|default)(?P<g>\d{1,18})\]:")
_PROGRESS = re.compile(r"[Ll]ast enqueued (?:NCCL )?work: (?P<enq>-?\d{1,18}),? last completed (?:NCCL )?work: "
                       r"(?P<done>-?\d{1,18})\b")
_AT = re.compile(r"(?:at work sequence id|at work|Timeout at NCCL work): (?P<at>-?\d{1,18})\b")
_WORK = re.compile(r"WorkNCCL\(SeqNum=(?P<seq>\d{1,18}), OpType=(?P<op>\w{1,64})(?:, NumelIn=(?P<nin>-?\d{1,18}))?"
                   r"(?:, NumelOut=(?P<nout>-?\d{1,18}))?")


@dataclass(frozen=True)
class RankProgress:
    """The last progress line of one rank in one process group."""
    pg: str
    pg_desc: str
    rank: int                     # rank within the group (global for the default group)
    global_rank: int | None       # from torchrun's [rankN]: prefix, when there is one
    enqueued: int
    completed: int
    failed_at: int | None         # the work id the watchdog failed on, when the line says
    source: str                   # "file:line"


@dataclass(frozen=True)
class TimedOutWork:
    pg: str
    rank: int
    seq: int
    op: str
    numel_in: int | None
    numel_out: int | None
    source: str


@dataclass(frozen=True)
class PGWavefront:
    """Per process group: the stuck collective, who never entered it, who waits in it."""
    pg: str
    pg_desc: str
    stuck_seq: int
    op: str                       # from a WorkNCCL timeout line at stuck_seq, "" when none
    origin: tuple                 # ranks whose last enqueued < stuck_seq: never entered it
    victims: tuple                # ranks that enqueued it and wait
    wavefront: dict               # last enqueued id -> ranks at it
    sizes: dict                   # rank -> NumelIn at stuck_seq (from WorkNCCL lines)
    progress: tuple               # tuple[RankProgress]
    note: str = ""


@dataclass(frozen=True)
class WatchdogView:
    groups: tuple                 # tuple[PGWavefront], the most telling first
    lines: int                    # watchdog lines read

    @property
    def found(self) -> bool:
        return bool(self.groups)


# Memory stays bounded whatever the log holds: at most MAX_KEYS (group, rank) pairs are followed (a
# job's watchdog names each rank once per group; a million distinct ones is not a job's log), and
# per pair only the WORKS_PER_RANK lowest timed-out work ids (the stuck one is the lowest that
# timed out; a log with a million WorkNCCL lines for one rank keeps four).
MAX_KEYS = 1 << 15
WORKS_PER_RANK = 4


@dataclass
class _Acc:
    progress: dict = field(default_factory=dict)   # (pg, rank) -> RankProgress (the last line wins)
    works: dict = field(default_factory=dict)      # (pg, rank, seq) -> TimedOutWork
    seqs: dict = field(default_factory=dict)       # (pg, rank) -> the seqs kept in `works`
    desc: dict = field(default_factory=dict)
    lines: int = 0
    ignored: int = 0                               # lines about (pg, rank) pairs past MAX_KEYS


def feed(acc: _Acc, line: str, source: str) -> None:
    """Read one log line (cheap rejection first: most lines of a log are not watchdog lines)."""
    _feed(acc, line, source, None)


def _feed(acc: _Acc, line: str, source: str, n: int | None) -> None:
    """feed(), with the line's source given as (name, line number): "name:n" is built only for a line kept
    (a log where every line is a watchdog line keeps few of them: issue 21). Each pattern runs only on a line
    holding its fixed words (a `str in` test costs a fraction of a regex search)."""
    if "ork" not in line:
        return
    prog = _PROGRESS.search(line) if "ast enqueued " in line else None
    work = None
    if prog is None:
        if "WorkNCCL(SeqNum=" not in line:
            return
        work = _WORK.search(line)
        if work is None:
            return
    pre = _PREFIX.search(line) if "Rank " in line else None
    glob = _GLOBAL.search(line) if "]:" in line else None
    g = int(glob.group("g")) if glob else None
    if pre is None and g is None:
        return
    if pre is not None:
        pg = pre.group("pg") or "0"
        rank = int(pre.group("rank"))
        desc = pre.group("desc")
        if desc:
            acc.desc[pg] = desc
    else:
        pg, rank = "0", g
    key = (pg, rank)
    if key not in acc.progress and key not in acc.seqs and len(acc.progress) + len(acc.seqs) >= MAX_KEYS:
        acc.ignored += 1
        return
    acc.lines += 1
    if prog is not None:
        at = _AT.search(line) if "at " in line else None
        prev = acc.progress.get(key)
        failed_at = int(at.group("at")) if at else (prev.failed_at if prev else None)
        if g is None and prev is not None:
            g = prev.global_rank
        acc.progress[key] = RankProgress(pg=pg, pg_desc=acc.desc.get(pg, ""), rank=rank, global_rank=g,
                                         enqueued=int(prog.group("enq")), completed=int(prog.group("done")),
                                         failed_at=failed_at, source=source if n is None else f"{source}:{n}")
        return
    seq = int(work.group("seq"))
    kept = acc.seqs.get(key)
    if kept is None:
        kept = acc.seqs[key] = []
    if seq not in kept:
        if len(kept) >= WORKS_PER_RANK:
            drop = max(kept)
            if seq > drop:  # only the lowest timed-out ids are kept: this one changes nothing
                return
            kept.remove(drop)
            acc.works.pop((pg, rank, drop), None)
        kept.append(seq)
    nin, nout = work.group("nin"), work.group("nout")
    acc.works[(pg, rank, seq)] = TimedOutWork(
        pg=pg, rank=rank, seq=seq, op=work.group("op"), numel_in=int(nin) if nin else None,
        numel_out=int(nout) if nout else None, source=source if n is None else f"{source}:{n}")


def _judge(acc: _Acc) -> WatchdogView:
    by_pg: dict[str, list[RankProgress]] = {}
    for p in acc.progress.values():
        by_pg.setdefault(p.pg, []).append(p)
    groups = []
    for pg, progs in by_pg.items():
        progs.sort(key=lambda p: p.rank)
        if all(p.enqueued <= p.completed and p.failed_at is None for p in progs):
            continue  # every rank finished all it enqueued (a periodic status line): nothing stuck here
        stuck = min(p.completed for p in progs) + 1
        if stuck <= 0:  # -1 completed: nothing ever completed, the first collective (1) is stuck
            stuck = 1
        origin = tuple(p.rank for p in progs if p.enqueued < stuck)
        victims = tuple(p.rank for p in progs if p.enqueued >= stuck)
        wave: dict[int, list[int]] = {}
        for p in progs:
            wave.setdefault(p.enqueued, []).append(p.rank)
        works = [w for (wpg, _r, s), w in acc.works.items() if wpg == pg and s == stuck]
        op = works[0].op if works else ""
        sizes = {w.rank: w.numel_in for w in works if w.numel_in is not None}
        note = ""
        if not origin and len(set(sizes.values())) > 1:
            note = "every rank seen entered it with different sizes: a shape mismatch across ranks"
        elif not origin:
            note = ("every rank in the log entered it: the cause is not a rank that skipped it (look at ranks "
                    "absent from the log, the network, or a kernel that never finished)")
        groups.append(PGWavefront(pg=pg, pg_desc=acc.desc.get(pg, ""), stuck_seq=stuck, op=op, origin=origin,
                                  victims=victims, wavefront={k: tuple(v) for k, v in sorted(wave.items())},
                                  sizes=sizes, progress=tuple(progs), note=note))
    groups.sort(key=lambda w: (not w.origin, w.pg))
    return WatchdogView(groups=tuple(groups), lines=acc.lines)


def scan(lines, source: str = "log") -> WatchdogView:
    """Judge the watchdog lines of one log (an iterable of str lines)."""
    return scan_many([(source, lines)])


def scan_many(logs) -> WatchdogView:
    """Judge several ranks' logs together: an iterable of (source name, iterable of str lines)."""
    acc = _Acc()
    for source, lines in logs:
        for n, line in enumerate(lines, 1):
            feed(acc, line, f"{source}:{n}")
    return _judge(acc)


# _feed keeps a line only if _PROGRESS ("... work: ") or _WORK ("WorkNCCL(SeqNum=") matches it
_WANTED = (b"ork: ", b"WorkNCCL(SeqNum=")


class Tap:
    """Collects watchdog lines from the bytes another reader pulls through it (one pass over stdin or a file).

    Memory stays bounded: only the unfinished last line is kept, cut at MAX_LINE bytes.
    """
    MAX_LINE = 64 * 1024

    def __init__(self, source: str):
        self.source = source
        self._acc = _Acc()
        self._part = b""
        self._n = 0

    def feed_bytes(self, data: bytes) -> None:
        # No copy of the block (`part + data` then `[:cut]` were two 4 MiB copies a block) and no split
        # into lines: only the lines holding "ork" are cut out, found with bytes.find; the CLI's
        # `explain --log` pays this pass on top of its own scan (issue 23: with the one-pass gate scan,
        # 60 -> ~150-210 MB/s of CPU; docs/explain.md).
        cut = data.rfind(b"\n")
        if cut < 0:
            self._part = (self._part + data)[-self.MAX_LINE:]
            return
        first = data.find(b"\n")
        head = self._part + data[:first] if self._part else data[:first]  # the line `_part` began
        self._part = data[cut + 1:][-self.MAX_LINE:]
        n0 = self._n
        self._n = n0 + 1 + data.count(b"\n", 0, cut)
        if not (b"ork: " in head or b"WorkNCCL(" in head or data.find(b"ork: ", first, cut) != -1
                or data.find(b"WorkNCCL(", first, cut) != -1):  # most blocks hold no watchdog line
            return
        if _WANTED[0] in head or _WANTED[1] in head:
            _feed(self._acc, head.decode("utf-8", "replace"), self.source, n0 + 1)
        # Only the lines _feed can keep: they hold "work: " (every progress wording) or "WorkNCCL(SeqNum=".
        # Lines with "network"/"worker" (NCCL INFO lines) are no longer decoded to be rejected (issue 21; 1.04x
        # on an ordinary log). Each word's next position is kept, so the block is read once per word.
        line, counted = n0 + 1, first
        na = data.find(_WANTED[0], first, cut)
        nb = data.find(_WANTED[1], first, cut)
        while na != -1 or nb != -1:
            pos = nb if na == -1 else na if nb == -1 else min(na, nb)
            line += data.count(b"\n", counted, pos)
            start = data.rfind(b"\n", 0, pos) + 1
            end = data.find(b"\n", pos, cut)
            end = cut if end == -1 else end
            _feed(self._acc, data[start:end].decode("utf-8", "replace"), self.source, line)
            counted = start
            if na != -1 and na < end:
                na = data.find(_WANTED[0], end, cut)
            if nb != -1 and nb < end:
                nb = data.find(_WANTED[1], end, cut)

    def close(self) -> None:
        if self._part:
            self._n += 1
            _feed(self._acc, self._part.decode("utf-8", "replace"), self.source, self._n)
            self._part = b""


class TapStream:
    """A binary stream that hands every byte read to a Tap as well."""

    def __init__(self, stream, tap: Tap):
        self._s, self._tap = stream, tap

    def read(self, n: int = -1) -> bytes:
        data = self._s.read(n)
        if data:
            self._tap.feed_bytes(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def readline(self, n: int = -1) -> bytes:
        data = self._s.readline(n)
        if data:
            self._tap.feed_bytes(data)
        return data

    def __iter__(self):
        return iter(self.readline, b"")

    def __getattr__(self, name):
        return getattr(self._s, name)


def judge_taps(taps) -> WatchdogView:
    """Judge the lines several Taps collected (several ranks' logs read together)."""
    acc = _Acc()
    for t in taps:
        t.close()
        for key, p in t._acc.progress.items():  # the bound holds across logs too
            if key in acc.progress or len(acc.progress) < MAX_KEYS:
                acc.progress[key] = p
        acc.works.update(t._acc.works)
        acc.desc.update(t._acc.desc)
        acc.lines += t._acc.lines
    return _judge(acc)
