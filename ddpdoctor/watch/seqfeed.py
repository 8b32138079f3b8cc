"""Live collective sequence numbers from torch's debug server: `watch`'s decisive progress signal.

A job that called `torch.distributed.debug.start_debug_server()` (torch >= 2.10) runs a small HTTP worker
server in every rank (a C++ thread named `pt_workerserver`, torch/csrc/distributed/c10d/control_plane/
WorkerServer.cpp) and registers its URL in the job's TCPStore under `debug_server/rank<N>`
(torch/distributed/debug/__init__.py, _store.py). Each flight-recorder dump it serves carries, per process
group, `pg_status`: last_enqueued_collective / last_started_collective / last_completed_collective
(FlightRecorderDetail.hpp getPgStatusJson; `dump_json` always writes it, entries only with
includeCollectives). So a rank whose completed number grows moves; a rank whose completed number stalls
while a collective is enqueued waits in it; a rank whose enqueued number is below the others' never
entered it. For NCCL that is the only reliable signal: the main thread spins in a device sync (CPU busy)
and the collective call returned long ago (the stack is in user code).

Endpoints (measured on torch 2.13 CPU, 2-rank Gloo job; docs/watch.md):
- `dump_nccl_trace_json?includecollectives=false` (CUDA builds only, FlightRecorderCuda.cpp): the NCCL
  recorder's pg_status alone, a few hundred bytes; `?onlyactive=true` adds only the entries not completed.
- `fr_trace_json` (every build, control_plane/Handlers.cpp): the CPU (Gloo) recorder, `dump_fr_trace_json(
  true, true)`: it takes no parameter and returns every entry (Gloo entries never get a completion time, so
  onlyActive drops none): ≈470 bytes and ≈35 µs of the rank's CPU per entry (10.6 ms for 300 entries),
  so it is read every FULL_EVERY_S, and every DENSE_EVERY_S only while a rank has stopped moving.
Both handlers are C++ lambdas run on the server's own (pre-started) httplib threads: no GIL, no new thread
in the rank; the recorder's mutex is held only while its entries are copied (dump_entries).

Only looks: the URL from /proc (the rank's one listener on the IPv6 wildcard: `_WorkerServer("::", 0)`),
or, when that is ambiguous, a read of the job's TCPStore over a plain socket (probes/workerserver.py: no
torch), then HTTP POSTs to the registered URL with a connect/read timeout and an overall
deadline, no redirects, a size cap, JSON only. Polling runs in one daemon thread: a slow or hostile
server never delays watch's tick. What the user should know (no rank runs a server although --debug-server
asked for it, a store that cannot be read, a server that stopped answering) is said once each, through
`note` (watch: one line on stderr), and watch goes on with its other measures.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping

from ddpdoctor.probes import workerserver

CHEAP_EVERY_S = 2.0    # pg_status only (NCCL's handler): a few hundred bytes
FULL_EVERY_S = 30.0    # the CPU recorder's whole buffer, while every rank moves
DENSE_EVERY_S = 2.0    # ... and while a rank stopped moving (a hang's verdict needs it within seconds)
TIMEOUT_S = 2.0        # connect, each read, and the whole answer
CHEAP_MAX = 1 << 20    # pg_status of a few hundred groups
FULL_MAX = 64 << 20    # a 100k-entry buffer
RESOLVE_EVERY_S = 30.0  # ranks with no URL yet (started later, an elastic restart): read the store again
BACKOFF_S = 30.0       # a rank whose server failed 3 times in a row: asked again only this often
NCCL_EP = "dump_nccl_trace_json"
CPU_EP = "fr_trace_json"
SEQ_MAX = 1 << 62


def post(url: str, endpoint: str, query: str = "", *, timeout: float = TIMEOUT_S, cap: int = CHEAP_MAX) -> bytes:
    """POST <url>/handler/<endpoint>?<query>; the body, or an exception. The whole answer within `timeout`
    (a server that trickles bytes is cut off), at most `cap` bytes, status 200 only (probes/workerserver.py)."""
    return workerserver.http_post(url, f"/handler/{endpoint}" + (f"?{query}" if query else ""), timeout=timeout, cap=cap)


def _int(v: Any) -> int | None:
    """torch writes the numbers as strings in JSON ("307"), as ints in pickles; anything else is no number."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str) and len(v) <= 20:
        try:
            v = int(v)
        except ValueError:
            return None
    return v if isinstance(v, int) and -1 <= v < SEQ_MAX else None


def parse(obj: Any) -> dict[str, dict[str, Any]]:
    """A dump's JSON -> {pg id: {"enq", "started", "done", "op"}}: op is the collective after `done` (the one
    pending), when the dump's entries name it. Anything malformed is left out, never raised."""
    if not isinstance(obj, dict) or not isinstance(obj.get("pg_status"), dict):
        raise ValueError("no pg_status in the answer: not a flight-recorder dump")
    out: dict[str, dict[str, Any]] = {}
    for pg, st in list(obj["pg_status"].items())[:4096]:
        if not isinstance(pg, str) or len(pg) > 64 or not isinstance(st, dict):
            continue
        enq, done = _int(st.get("last_enqueued_collective")), _int(st.get("last_completed_collective"))
        if enq is None or done is None:
            continue
        out[pg] = {"enq": enq, "started": _int(st.get("last_started_collective")), "done": done, "op": None}
    entries = obj.get("entries")
    if isinstance(entries, list):
        for e in entries[-100000:]:
            if not isinstance(e, dict):
                continue
            pg, seq, name = str(e.get("pg_id"))[:64], _int(e.get("collective_seq_id")), e.get("profiling_name")
            st = out.get(pg)
            if st and seq == st["done"] + 1 and isinstance(name, str) and not e.get("is_p2p"):
                st["op"] = name.rsplit(":", 1)[-1][:64]  # "gloo:all_reduce", "nccl:all_reduce"
    return out


def parse_body(body: bytes) -> dict[str, dict[str, Any]]:
    """A dump's bytes -> parse()'s answer without decoding every entry: torch writes the keys in order
    (nlohmann::json's std::map: comm_lib_version, entries, ..., pg_status, version), so pg_status is the last
    `"pg_status":` (a string value holds its quotes escaped), and the pending collective's entry is the flat
    object (dump_json writes no frames) around `"collective_seq_id":<done+1>,`. A 1 MB Gloo buffer costs
    ~1 ms this way instead of json.loads' ~150 ms."""
    text = body.decode("utf-8", "replace")
    if not text.lstrip().startswith("{"):
        raise ValueError("not a JSON object")
    dec = json.JSONDecoder()
    i = text.rfind('"pg_status":')
    if i < 0:
        raise ValueError("no pg_status in the answer: not a flight-recorder dump")
    j = i + len('"pg_status":')
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    status, _ = dec.raw_decode(text, j)
    out = parse({"pg_status": status})
    for pg, p in out.items():
        if p["enq"] <= p["done"]:
            continue
        needle = re.compile(f'"collective_seq_id":\\s*{p["done"] + 1}\\s*[,}}]')
        for tries, m in enumerate(needle.finditer(text)):
            if tries >= 64 or p["op"] is not None:
                break
            start = text.rfind("{", 0, m.start())
            try:
                e, _ = dec.raw_decode(text, start) if start >= 0 else (None, 0)
            except ValueError:
                e = None
            found = parse({"pg_status": {pg: {"last_enqueued_collective": p["enq"],
                                              "last_completed_collective": p["done"]}},
                           "entries": [e] if isinstance(e, dict) else []})
            p["op"] = found[pg]["op"] if str(e.get("pg_id") if isinstance(e, dict) else None) == pg else None
    return out


class _Rank:
    def __init__(self, rank: int, url: str):
        self.rank, self.url = rank, url
        self.mode: str | None = None       # NCCL_EP or CPU_EP, decided on the first answer that has groups
        self.next = 0.0
        self.next_full = 0.0
        self.fails = 0
        self.asked = float("-inf")
        self.last: dict[str, Any] | None = None   # {"t", "pgs"} or {"t", "error"}


class SeqFeed:
    """Polls each rank's sequence numbers in a daemon thread; `latest(rank)` is what watch/observe.py adds
    to that rank's observation as "seq" (a fresh dict per poll, so the judge sees each poll once)."""

    def __init__(self, ranks: Iterable[Any], *, resolve=None, clock=time.monotonic,
                 note: Callable[[str], None] | None = None):
        self.ranks = {r.rank: r for r in ranks}
        self._resolve = resolve or _urls
        self._note = note or (lambda line: None)   # one line for the user (watch: stderr), each news once
        self._said: set[str] = set()
        self._clock = clock
        self._lock = threading.Lock()
        self._by_rank: dict[int, _Rank] = {}
        self._next_resolve = 0.0
        self._dense_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error = ""   # the last reason no rank could be asked (store unreachable, nothing registered)

    # -------------------------------------------------------------- what watch calls
    def start(self) -> "SeqFeed":
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-seqfeed", daemon=True)
        self._thread.start()
        return self

    def dense(self, now: float) -> None:
        """A rank stopped moving: ask every DENSE_EVERY_S for a while (the hang's verdict needs fresh numbers)."""
        self._dense_until = now + 20.0

    def add(self, ranks: Iterable[Any]) -> None:
        with self._lock:
            for r in ranks:
                old = self.ranks.get(r.rank)
                if old is not None and old.pid != r.pid:  # an elastic restart: its server is another one
                    self._by_rank.pop(r.rank, None)
                self.ranks[r.rank] = r
            self._next_resolve = 0.0

    def latest(self, rank: int) -> dict[str, Any] | None:
        with self._lock:
            r = self._by_rank.get(rank)
            return None if r is None or r.last is None else r.last

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=TIMEOUT_S + 1)

    def _say(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            try:
                self._note(line)
            except Exception:  # noqa: BLE001 - a closed stderr must not stop the feed
                pass

    # -------------------------------------------------------------- the thread
    def _run(self) -> None:
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="ddpdoctor-seq") as pool:
            while not self._stop.is_set():
                now = self._clock()
                try:
                    self.tick(now, pool)
                except Exception as e:  # noqa: BLE001 - the feed is a witness: never take watch down
                    self.error = f"{type(e).__name__}: {e}"[:200]
                self._stop.wait(0.5)

    def tick(self, now: float, pool=None) -> None:
        """One round: resolve URLs when due, then ask every rank that is due (in parallel)."""
        if now >= self._next_resolve and len(self._by_rank) < len(self.ranks):
            self._next_resolve = now + RESOLVE_EVERY_S
            try:
                urls = self._resolve(list(self.ranks.values()))
                self.error = "" if urls else "no rank's debug server was found"
            except LookupError as e:  # what was looked for, and the line that starts a server
                urls, self.error = {}, str(e)
            except Exception as e:  # noqa: BLE001 - a bug in a resolver must not stop the feed: one line
                urls, self.error = {}, f"the ranks' debug servers could not be looked up: {type(e).__name__}: {e}"[:300]
            new = sorted(r for r in urls if r not in self._by_rank)
            if self.error:
                self._say(f"{self.error}; watching without its sequence numbers, looking again every "
                          f"{RESOLVE_EVERY_S:.0f} s")
            elif new and self._said:  # a server found after a note said there was none
                self._say(f"torch's debug server found in rank {','.join(map(str, new))}: reading its sequence numbers")
            with self._lock:
                for rank, url in urls.items():
                    if rank in self.ranks and (rank not in self._by_rank or self._by_rank[rank].url != url):
                        self._by_rank[rank] = _Rank(rank, url)
        dense = now < self._dense_until
        due = [r for r in self._by_rank.values()
               if now >= r.next or (dense and not r.fails and now >= r.asked + DENSE_EVERY_S)]
        if not due:
            return
        for r in (pool.map(lambda r: self._ask(r, now), due) if pool else map(lambda r: self._ask(r, now), due)):
            pass

    def _ask(self, r: _Rank, now: float) -> None:
        dense = now < self._dense_until
        r.asked = now
        try:
            pgs = self._read(r, now, dense)
            res: dict[str, Any] = {"t": self._clock(), "pgs": pgs, "source": r.mode}
            r.fails = 0
        except Exception as e:  # noqa: BLE001 - refused, timed out, garbage: note it, ask again later
            r.fails += 1
            res = {"t": self._clock(), "error": f"{type(e).__name__}: {e}"[:200]}
        if r.mode == CPU_EP:
            every = DENSE_EVERY_S if dense else FULL_EVERY_S
        else:
            every = CHEAP_EVERY_S
        r.next = now + (BACKOFF_S if r.fails >= 3 else every)
        if r.fails == 3:
            self._say(f"rank {r.rank}'s debug server at {r.url} did not answer 3 times ({res['error']}); "
                      f"asked again every {BACKOFF_S:.0f} s, watching with the other measures")
        with self._lock:
            r.last = res

    def _read(self, r: _Rank, now: float, dense: bool) -> dict[str, dict[str, Any]]:
        if r.mode in (None, NCCL_EP):
            try:
                pgs = parse_body(post(r.url, NCCL_EP, "includecollectives=false"))
            except workerserver.HTTPError as e:
                if e.code != 404 or r.mode == NCCL_EP:  # 404: a CPU build has no NCCL recorder handler
                    raise
                pgs = {}
            if pgs:
                r.mode = NCCL_EP
                pending = [p for p in pgs.values() if p["enq"] > p["done"]]
                if pending and dense:  # name the collective: only the entries not completed
                    named = parse_body(post(r.url, NCCL_EP, "onlyactive=true", cap=FULL_MAX))
                    for pg, p in pgs.items():
                        if pg in named and named[pg]["done"] == p["done"]:
                            p["op"] = named[pg]["op"]
                return pgs
        pgs = parse_body(post(r.url, CPU_EP, cap=FULL_MAX))
        if pgs:
            r.mode = CPU_EP
        return pgs


def _urls(ranks: list[Any]) -> dict[int, str]:
    """rank -> URL (probes/workerserver.py: /proc, else the job's store, neither importing torch); raises
    LookupError with the one line that says what was looked for when no rank's server was found."""
    found = workerserver.find(ranks, TIMEOUT_S)
    if not found.urls:
        raise LookupError(found.why if found.serving else f"{found.why}; {workerserver.START_HELP}")
    return found.urls


def for_ranks(ranks: Iterable[Any], mode: str, note: Callable[[str], None] | None = None) -> SeqFeed | None:
    """mode "on" (--debug-server: asked for, so a job without the server is told so, through `note`),
    "auto" (only when a rank runs a worker server: a job without one hears nothing), "off"."""
    ranks = list(ranks)
    if mode == "off" or not ranks:
        return None
    if mode == "auto" and not any(workerserver.has_debug_server(r.pid) for r in ranks):
        return None
    return SeqFeed(ranks, note=note).start()


def observation(feed: SeqFeed | None, rank: int, seen: dict[int, float]) -> Mapping[str, Any] | None:
    """The rank's newest poll if watch has not passed it on yet (seen: rank -> poll time already given)."""
    if feed is None:
        return None
    last = feed.latest(rank)
    if last is None or seen.get(rank) == last["t"]:
        return None
    seen[rank] = last["t"]
    return last
