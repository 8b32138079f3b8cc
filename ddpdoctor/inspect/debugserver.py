"""Flight-recorder entries from torch's debug server, for a job started with
`torch.distributed.debug.start_debug_server()` (torch >= 2.10).

Each rank of such a job runs a small HTTP worker server and registers its URL in the job's own
TCPStore under `debug_server/rank<N>` (torch/distributed/debug/__init__.py, _store.py); POST
`/handler/fr_trace_json` returns the rank's flight-recorder buffer as JSON, the same format as a
dump file (torch/csrc/distributed/c10d/control_plane/WorkerServer.cpp). So a running job's
collective sequence is readable *now*, without waiting for a watchdog timeout to write dumps.

Only looks: where each rank's server listens comes from /proc, and from the job's store for ranks /proc
cannot place (other nodes, other network namespaces), read over a plain socket without torch
(probes/workerserver.py); then one read-only handler call per rank, each with a timeout; redirects are
not followed; the body is size-capped and decoded as JSON only. Names are looked up with a deadline:
getaddrinfo has none of its own (a silent resolver holds the caller for glibc's resolv.conf timeout ×
attempts, and a pool's worker stuck in it holds the pool's exit): the store's host is resolved first
(probes/dns.py, in a daemon thread) and the store read at the address; each rank's call runs under a
deadline in a daemon thread. A job whose ranks run no server is told
so in one line (what was looked for, and the line that starts it), without reading the store.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from ddpdoctor.probes import workerserver
from ddpdoctor.probes.timeouts import call_with_timeout

MAX_BYTES = 256 << 20    # a 20k-entry buffer is a few MB


def fetch(url: str, endpoint: str, timeout: float) -> bytes:
    """The handler's answer, whole within 4 × `timeout` (a large buffer from another node takes a while; a
    server that trickles is still cut off), at most MAX_BYTES; the URL's host name looked up within
    `timeout` too (a daemon thread: a lookup that never returns is left behind, not waited for)."""
    return call_with_timeout(_post, url, f"/handler/{endpoint}", 4 * timeout, MAX_BYTES, timeout=5 * timeout + 1)


def _post(url: str, target: str, timeout: float, cap: int) -> bytes:
    return workerserver.http_post(url, target, timeout=timeout, cap=cap)


def _at_store_address(ranks: Sequence[Mapping[str, Any]], timeout: float) -> tuple[list, str]:
    """The ranks with the store's host (their MASTER_ADDR) replaced by its address, looked up within `timeout`;
    (None, why) when it does not resolve in time. workerserver.find then connects to an address: no lookup."""
    target = workerserver.store_target(ranks)
    if target is None:
        return list(ranks), ""
    addrs, why = workerserver.addresses(target[0], timeout)
    if not addrs:
        return None, f"the job's store host {target[0]} (MASTER_ADDR) did not resolve: {why}"
    if addrs[0] == target[0]:   # an address already
        return list(ranks), ""
    return [{**r, "env": {**r["env"], "MASTER_ADDR": addrs[0]}}
            if isinstance(r, Mapping) and isinstance(r.get("env"), Mapping) and r["env"].get("MASTER_ADDR") == target[0]
            else r for r in ranks], ""


def _buffers(ranks: Sequence[Mapping[str, Any]], timeout: float):
    """Every rank's live buffer: (dumps, skipped, where), or (None, error, where)."""
    from ddpdoctor import flightrec
    from ddpdoctor.flightrec.dumps import parse

    at, why = _at_store_address(ranks, timeout)
    if at is None:
        return None, why, "debug server"
    found = workerserver.find(at, timeout, world=True)
    named = workerserver.store_target(ranks)   # the store as the job names it, not the address looked up
    where = f"debug server (store {named[0]}:{named[1]})" if found.store and named else "debug server"
    if not found.urls:
        return None, found.why, where
    urls = found.urls
    target = workerserver.store_target(ranks)
    world = max(len(ranks), target[2] if target else 0, *(1 + r for r in urls))

    def one(item):
        rank, url = item
        try:
            obj = json.loads(fetch(url, "fr_trace_json", timeout))
            return parse(obj, f"rank {rank} ({url})", rank), ""
        except flightrec.BadDump as e:
            return None, str(e)
        except Exception as e:  # noqa: BLE001 - refused, timed out, not JSON: note it, keep the others
            return None, f"rank {rank} ({url}): {type(e).__name__}: {e}"

    with ThreadPoolExecutor(max_workers=min(32, len(urls))) as pool:
        got = list(pool.map(one, sorted(urls.items())))
    dumps = [d for d, _ in got if d is not None]
    skipped = ([why for _, why in got if why] + ([found.why] if found.why else [])
               + [f"rank {r}: no debug server found" for r in range(world) if r not in urls])
    return dumps, skipped, where


def flight_recorder(ranks: Sequence[Mapping[str, Any]], timeout: float = 2.0) -> dict[str, Any]:
    """The verdict over every rank's live flight-recorder buffer, in the shape armed.flight_recorder
    returns ({"dir", "verdict"} or {"dir", "error"}), with `source` = the store it came from."""
    from ddpdoctor import flightrec
    from ddpdoctor.flightrec.render import to_dict

    dumps, skipped, where = _buffers(ranks, timeout)
    if dumps is None:
        return {"dir": where, "error": skipped}
    if not dumps:
        return {"dir": where, "error": "; ".join(skipped[:3]) or "no rank answered"}
    return {"dir": where, "source": "debug server", "verdict": to_dict(flightrec.analyze(dumps, skipped))}


def collective_counts(ranks: Sequence[Mapping[str, Any]], timeout: float = 2.0) -> dict[int, int]:
    """rank -> the highest record id in its live buffer: it grows by one with every collective the rank
    enters (FlightRecorder's record id; Gloo never marks entries completed, so completion is not used).
    Read twice, it tells a rank that keeps entering collectives from one stuck in the same one."""
    dumps, _, _ = _buffers(ranks, timeout)
    out = {}
    for d in dumps or ():
        ids = [e.get("record_id") for e in d.raw_entries if isinstance(e, dict)]
        ids = [i for i in ids if type(i) is int]
        if ids:
            out[d.rank] = max(ids)
    return out


# ----------------------------------------------------------------------------- stacks without ptrace

def _short(path: str) -> str:
    """py-spy's short file name: the part after site-/dist-packages ("torch/distributed/..."), else the
    base name (where.locate and the checks read `file` that way)."""
    for mark in ("/site-packages/", "/dist-packages/"):
        if mark in path:
            return path.split(mark, 1)[1]
    return os.path.basename(path)


def parse_traceback(pid: int, text: str):
    """faulthandler's dump (the `dump_traceback` handler) as a py-spy Dump: one Thread per
    "Thread 0x... (most recent call first):" block, frames innermost first. The main thread is the
    one whose outermost frame is `<module>` (faulthandler does not name threads); the thread that
    served the request ("Current thread", no Python frame) is left out."""
    import re

    from ddpdoctor.probes.pyspy import Dump, Frame, Thread

    frame_re = re.compile(r'^\s*File "(?P<path>[^"]*)", line (?P<line>\d+) in (?P<name>\S+)')
    threads: list[tuple[int, list]] = []
    for line in text.splitlines():
        head = re.match(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)", line)
        if head:
            threads.append((int(head.group(2), 16), []))
            continue
        m = frame_re.match(line)
        if m and threads:
            threads[-1][1].append(Frame(m["name"], _short(m["path"]), m["path"], int(m["line"])))
    out = []
    for tid, frames in threads:
        if not frames:
            continue
        main = frames[-1].name == "<module>"
        out.append(Thread(tid, "MainThread" if main else "", True, tuple(frames)))
    out.sort(key=lambda t: t.name != "MainThread")
    if not out:
        return Dump(pid, False, error="the debug server's traceback holds no Python frame", kind="other")
    return Dump(pid, True, tuple(out), extra={"source": "debug server"})


def stack_dumps(ranks: Sequence[Mapping[str, Any]], timeout: float) -> dict[int, Any]:
    """pid -> a Dump read from each rank's debug server (`dump_traceback`), for ranks py-spy could
    not read; {} when the job has no debug server."""
    from ddpdoctor.probes.pyspy import Dump

    at, _ = _at_store_address(ranks, timeout)
    urls = workerserver.find(at, timeout).urls if at is not None else {}  # this node's ranks: those py-spy could not read
    if not urls:
        return {}

    def one(r):
        url = urls.get(r["rank"])
        if url is None:
            return r["pid"], None
        try:
            return r["pid"], parse_traceback(r["pid"], fetch(url, "dump_traceback", timeout).decode("utf-8", "replace"))
        except Exception as e:  # noqa: BLE001 - refused, timed out: that rank stays unread
            return r["pid"], Dump(r["pid"], False, error=f"debug server: {type(e).__name__}: {e}"[:300], kind="other")

    with ThreadPoolExecutor(max_workers=min(32, max(1, len(ranks)))) as pool:
        return {pid: d for pid, d in pool.map(one, ranks) if d is not None}
