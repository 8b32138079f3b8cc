"""The flight recorder as `watch`'s witness: when the job is armed, name the hang from the recorder, with the
collective and its sequence number.

An armed job (`ddpdoctor arm`, `prolog --task`) has TORCH_FR_DUMP_TEMP_FILE=<dir>/fr_rank_ in its ranks'
environment (inspect/armed.py `dump_dirs`). Dumps appear there:
- NCCL: every rank dumps when the watchdog sees a collective time out (TORCH_NCCL_DUMP_ON_TIMEOUT=1;
  torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the watchdog's dump before abort);
- Gloo: torch 2.13 records Gloo collectives too (on by default: a torchrun Gloo job here recorded its
  all_reduces with no variable set, and TORCH_FR_BUFFER_SIZE=0 turned it off), but nothing dumps on a Gloo
  timeout (tried here: TORCH_NCCL_DUMP_ON_TIMEOUT=1 and a 4 s Gloo timeout left the folder empty); a Gloo
  job's dumps are the ones it writes itself (`torch._C._distributed_c10d._dump_fr_trace()`, as
  tests/flightrec/hang_job.py does) into the same folder.
Only dumps written after this watch started count (a folder reused by an earlier run holds stale ones).
Once the dumps stop changing (SETTLE_S) or every rank has one, flightrec.analyze gives the verdict:
the ranks that never entered collective #seq (the origin), or called another one, or — NCCL — all entered
and none completed. That verdict becomes one `hang` event with `source: "flight recorder"`, `seq`,
`collective` and `pg`, beside the hang watch's own judgement named from stacks.
Dumps are read by flightrec (restricted unpickler, size caps): nothing in them can execute code.
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterable, Mapping

POLL_S = 2.0     # a scandir of one folder: microseconds
SETTLE_S = 3.0   # torch's ranks dump within about a second of each other (the watchdog's signal via the store)


class FrFeed:
    def __init__(self, prefixes: Iterable[str], world: int | None = None, since: float | None = None):
        self.prefixes = sorted(set(prefixes))          # "<dir>/fr_rank_": torch appends the global rank
        self.world = world
        self.since = time.time() if since is None else since
        self.seen: dict[str, tuple[float, int]] = {}   # path -> (mtime, size) already read
        self.dumps: dict[int, Any] = {}                # rank -> its newest RankDump
        self.changed_at: float | None = None
        self.said: set[tuple] = set()
        self.notes: list[str] = []
        self.where: dict[int, tuple[str, int]] = {}   # rank -> (host, pid), from watch's observations
        self._next = 0.0

    @classmethod
    def for_ranks(cls, ranks: Iterable[Any]) -> "FrFeed | None":
        """From the watched ranks (watch/ranks.py Rank: .env, .world_size); None when the job is not armed."""
        from ddpdoctor.inspect.armed import PREFIX_VARS
        prefixes, world = [], None
        for r in ranks:
            env: Mapping[str, str] = r.env or {}
            world = world or r.world_size
            p = next((env[k] for k in PREFIX_VARS if env.get(k)), None)
            if p:
                prefixes.append(p)
        return cls(prefixes, world) if prefixes else None

    def _scan(self) -> bool:
        from ddpdoctor import flightrec
        from ddpdoctor.flightrec.dumps import rank_from_name
        new = False
        for prefix in self.prefixes:
            d, base = os.path.dirname(prefix) or ".", os.path.basename(prefix)
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for f in entries:
                rest = f.name[len(base):] if f.name.startswith(base) else ""
                rank = rank_from_name(f.name) if rest[:1].isdigit() else None
                try:
                    st = f.stat(follow_symlinks=False)
                except OSError:
                    continue
                if rank is None or not f.is_file(follow_symlinks=False) or st.st_mtime < self.since:
                    continue
                if self.seen.get(f.path) == (st.st_mtime, st.st_size):
                    continue
                self.seen[f.path] = (st.st_mtime, st.st_size)
                try:
                    self.dumps[rank] = flightrec.load_file(f.path)
                except flightrec.BadDump as e:  # still being written, or not a dump: the next look decides
                    self.seen.pop(f.path, None)
                    self.notes = [str(e)[:200]]
                    continue
                new = True
        return new

    def poll(self, now: float, final: bool = False) -> list[dict[str, Any]]:
        """Events from dumps that appeared since the watch started; `final`: the last look (the job ended)."""
        if now < self._next and not final:
            return []
        self._next = now + POLL_S
        if self._scan():
            self.changed_at = now
        if not self.dumps or self.changed_at is None:
            return []
        complete = self.world is not None and len(self.dumps) >= self.world
        if not (final or complete or now - self.changed_at >= SETTLE_S):
            return []
        from ddpdoctor import flightrec
        v = flightrec.analyze([self.dumps[r] for r in sorted(self.dumps)])
        ev = event(v)
        if ev is None:
            return []
        key = (ev["pg"], ev["seq"], ev["status"], tuple(ev["ranks"]))
        if key in self.said:
            return []
        self.said.add(key)
        return [ev]

    def seqs(self) -> dict[int, int]:
        """rank -> the highest collective sequence number its dump recorded (the default group's)."""
        out = {}
        for r, d in self.dumps.items():
            ids = [int(s) for pg, by in d.collectives.items() for s in by if str(pg) == "0"]
            if ids:
                out[r] = max(ids)
        return out


def event(v) -> dict[str, Any] | None:
    """A `hang` event (render/watch.py's shape) from a flightrec Divergence; None when it shows no hang."""
    g = v.first
    if g is None or g.status not in ("diverged", "mismatch", "stuck") or g.seq is None:
        return None
    name = f"pg {g.pg}" + (f" ({g.pg_desc})" if g.pg_desc else "")
    if g.status == "diverged":
        origin, waiting = list(g.not_entered), list(g.waiting)
        detail = f"never entered collective #{g.seq} {g.op} of {name} (flight recorder)"
    elif g.status == "mismatch":
        odd = g.variants[-1] if len(g.variants) > 1 else None
        origin = list(odd.ranks) if odd else list(g.not_entered)
        waiting = [r for var in g.variants[:-1] for r in var.ranks]
        main = g.variants[0].op if g.variants else g.op
        detail = (f"called {odd.op if odd else '?'} at collective #{g.seq} of {name} where the others "
                  f"called {main} (flight recorder)")
    else:  # NCCL: every dumped rank entered it, none completed it
        origin, waiting = list(v.missing), sorted(g.waiting)
        detail = (f"every dumped rank entered collective #{g.seq} {g.op} of {name} and none completed it "
                  f"(flight recorder): " + (f"no dump from ranks {','.join(map(str, v.missing))}" if v.missing
                                            else "the network, or a GPU kernel that never finished"))
    return {"kind": "hang", "source": "flight recorder", "status": g.status, "ranks": sorted(origin),
            "hosts": [], "where": [], "detail": detail, "seq": g.seq, "collective": g.op, "pg": g.pg,
            "waiting": {"ranks": sorted(waiting), "call": g.op, "at": f"#{g.seq} of {name}"},
            "origin_ranks": sorted(origin)}


def for_source(source) -> FrFeed | None:
    """The feed for watch/loop.py's source (NodeView, or --gather's first node: its own ranks' folder)."""
    ranks = getattr(source, "ranks", None) or {}
    feed = FrFeed.for_ranks(ranks.values())
    host = getattr(source, "host", None)
    if feed is not None and host:
        # where each rank was when watch started: a dump that comes before watch's first observation of a
        # rank (a loaded machine; CI) still names its host and pid; later observations replace these
        feed.where.update({r.rank: (host, r.pid) for r in ranks.values() if getattr(r, "rank", None) is not None})
    return feed


def events(feed: FrFeed | None, now: float, obs: Iterable[Mapping[str, Any]] = (), final: bool = False) -> list[dict]:
    """watch/loop.py's hook: the feed's new events, with the host and pid of each rank this watch sees."""
    if feed is None:
        return []
    seen = {o["rank"]: (o["host"], o["pid"]) for o in obs if "rank" in o and "host" in o and "pid" in o}
    feed.where.update(seen)
    out = []
    for e in feed.poll(now, final):
        known = [r for r in e["ranks"] if r in feed.where]
        e["where"] = [{"rank": r, "host": feed.where[r][0], "pid": feed.where[r][1], "where": {}} for r in known]
        e["hosts"] = sorted({feed.where[r][0] for r in known})
        if not known and e["ranks"]:
            e["detail"] = f"rank{'s' if len(e['ranks']) > 1 else ''} {','.join(map(str, e['ranks']))} {e['detail']}"
        out.append({**e, "t": round(now, 3)})
    return out
