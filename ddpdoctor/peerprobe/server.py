"""`ddpdoctor network --listen`: the master side of the probe protocol (see ddpdoctor/probes/handshake.py).

Replaces `nc -l 29400`: it holds the rendezvous port and a second port from this host's
ephemeral range, answers each worker's handshake, prints who connected from which address and
on which local interface, and stops once `--expect` workers completed both ports or the timeout
passed. Both sockets are closed on every way out, so nothing stays listening.
"""
from __future__ import annotations

import errno
import random
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ddpdoctor.probes.handshake import PROTO, clean_token, read_line
from ddpdoctor.probes.nics import list_nics, nic_with_addr
from ddpdoctor.probes.sockets import read_port_range


MAX_HANDLERS = 64  # connections answered at once; each waits at most 2 s for its one line
# Exchanges kept in ProbeServer.incoming when nobody consumes them (cluster mode keeps them for the
# report): 1000 nodes probing each node's two ports plus a bulk probe are 3000; a flood past this cap
# is counted in `dropped`, not stored.
MAX_INCOMING = 16384
DRAIN_S = 3.0   # after the last expected worker, how long connections still open may finish (its BULK probe)
MAX_WORKERS = 4096  # distinct (name, address) arrivals `listen` records


class ListenError(Exception):
    """The listener could not start (port taken, no permission); the message says why."""


@dataclass
class Worker:
    host: str
    addr: str
    interface: str
    rdzv_at: float | None = None
    eph_at: float | None = None
    bulk: list[dict] = field(default_factory=list)  # path-MTU probes: bytes received of asked, our MTU

    @property
    def complete(self) -> bool:
        return self.rdzv_at is not None and self.eph_at is not None


@dataclass
class ListenResult:
    port: int
    eport: int
    eport_range: tuple[int, int]
    expect: int | None
    duration_s: float
    workers: list[Worker] = field(default_factory=list)
    timed_out: bool = False

    interrupted: str = ""  # the signal that ended the wait ("SIGTERM"), "" otherwise

    @property
    def ok(self) -> bool:
        if self.expect is None:  # nobody came is a failure too (docs/network.md: a timeout exits 1)
            return bool(self.workers) and all(w.complete for w in self.workers)
        return sum(w.complete for w in self.workers) >= self.expect


def bind_listener(port: int) -> socket.socket:
    """Listen on every address, dual-stack when IPv6 exists (as c10d's TCPStore does)."""
    errors = []
    for fam, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
        except OSError as e:
            errors.append(e)
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((host, port))
            s.listen(64)
            s.setblocking(False)
            return s
        except OSError as e:
            s.close()
            if e.errno == errno.EADDRINUSE:
                raise
            errors.append(e)
    raise errors[-1] if errors else OSError("no address family available")


def bind_ephemeral(rng: tuple[int, int], *, tries: int = 64) -> socket.socket:
    """A listening socket on a random port inside `rng` (the range Gloo/NCCL's ports come from)."""
    lo, hi = rng
    last: OSError | None = None
    for _ in range(tries):
        try:
            return bind_listener(random.randint(lo, hi))
        except OSError as e:
            last = e
    raise ListenError(f"could not bind any port in {lo}-{hi}: {last}")


def _plain(addr: str) -> str:
    return addr[7:] if addr.startswith("::ffff:") else addr


class ProbeServer:
    """The protocol's master side, answering in a background thread until `close()`.

    Holds the rendezvous port (unless `require_port=False` and it is taken: `port_error` says
    why) and a port from the ephemeral range, answers HELLO on the first and EPHEMERAL on the
    second, and records each completed exchange in `incoming` (`from`, `addr`, `port`:
    rendezvous|ephemeral, `interface`). `network --listen` and `cluster` both serve through it.
    """

    def __init__(self, port: int, me: str, *, port_range: tuple[int, int] | None = None,
                 require_port: bool = True, on_event: Callable[[dict], None] | None = None):
        self.port = port
        self.range = port_range or read_port_range() or (32768, 60999)
        self.me = clean_token(me)
        self.port_error = ""
        self.incoming: list[dict] = []
        self.dropped = 0  # exchanges past MAX_INCOMING, not kept
        self.changed = threading.Condition()
        self._on_event = on_event
        self._stop = threading.Event()
        self._socks: dict[socket.socket, bool] = {}  # socket -> is the ephemeral one
        try:
            self._socks[bind_listener(port)] = False
        except OSError as e:
            why = "already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
            if require_port:
                raise ListenError(f"port {port} is already in use" if e.errno == errno.EADDRINUSE
                                  else f"cannot listen on port {port}: {why}") from None
            self.port_error = why
        try:
            eph = bind_ephemeral(self.range)
        except ListenError:
            self._close_sockets()
            raise
        self.eport = eph.getsockname()[1]
        self._socks[eph] = True
        self._nics = list_nics()
        # Live handlers only (each removes itself): a finished connection keeps no memory, and at
        # most MAX_HANDLERS run at once; a connection beyond that is closed at once, unanswered.
        self._handlers: set[threading.Thread] = set()
        self._slots = threading.BoundedSemaphore(MAX_HANDLERS)
        self._live: dict[socket.socket, float] = {}  # connection -> when accepted (the oldest is evicted first)
        self._thread = threading.Thread(target=self._loop, name="probe-server", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select(list(self._socks), [], [], 0.1)
            except (OSError, ValueError):
                return
            for s in ready:
                try:
                    conn, peer = s.accept()
                except OSError:
                    continue
                self._dispatch(conn, _plain(peer[0]), self._socks[s])

    def _dispatch(self, conn: socket.socket, peer: str, ephemeral: bool) -> None:
        """Answer `conn` in a thread of its own, within the bound; never let the server thread die."""
        if not self._slots.acquire(blocking=False):
            # MAX_HANDLERS connections already: a flood must not exhaust threads or memory, but idle
            # connections must not shut real workers out either (70 of them did, for as long as they
            # stayed): the oldest one, which a real worker would have finished with in milliseconds,
            # makes room for the new one.
            if not self._evict_oldest() or not self._slots.acquire(timeout=1.0):
                conn.close()
                return
        t = None
        try:
            conn.setblocking(True)
            with self.changed:
                self._live[conn] = time.monotonic()
            t = threading.Thread(target=self._handle, args=(conn, peer, ephemeral), daemon=True)
            with self.changed:
                self._handlers.add(t)
            t.start()
        except (RuntimeError, OSError, MemoryError):  # "can't start new thread": drop this one, keep serving
            with self.changed:
                self._handlers.discard(t)
                self._live.pop(conn, None)
            self._slots.release()
            conn.close()

    def _handle(self, conn: socket.socket, peer: str, ephemeral: bool) -> None:
        try:
            parts = read_line(conn, 2.0).split()
            if len(parts) == 5 and parts[0] == PROTO and parts[1] == "BULK" and not ephemeral:
                self._bulk(conn, peer, parts)
                return
            if len(parts) != 3 or parts[0] != PROTO:
                return  # not a ddpdoctor probe (a port scanner, nc, curl): say nothing
            if parts[1] == "HELLO" and not ephemeral:
                conn.sendall(f"{PROTO} WELCOME {self.me} {self.eport} {self.range[0]}-{self.range[1]}\n".encode())
            elif parts[1] == "EPHEMERAL" and ephemeral:
                conn.sendall(f"{PROTO} OK {self.me}\n".encode())
            else:
                return
            nic = nic_with_addr(self._nics, _plain(conn.getsockname()[0]))
            event = {"from": clean_token(parts[2]), "addr": peer, "port": "ephemeral" if ephemeral else "rendezvous",
                     "interface": nic.name if nic else "?"}
            self._record(event)
        except OSError:
            pass
        finally:
            conn.close()
            with self.changed:
                self._handlers.discard(threading.current_thread())
                self._live.pop(conn, None)
            self._slots.release()

    def busy(self) -> bool:
        """Some connection is still being answered (call with `changed` held)."""
        return bool(self._live)

    def _evict_oldest(self, min_age: float = 0.05) -> bool:
        """Shut down the oldest live connection (its handler's read returns, its slot frees)."""
        with self.changed:
            now = time.monotonic()
            old = [(t, c) for c, t in self._live.items() if now - t >= min_age]
            if not old:
                return False
            _, conn = min(old, key=lambda tc: tc[0])
            del self._live[conn]
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return True

    def _bulk(self, conn: socket.socket, peer: str, parts: list[str]) -> None:
        """Path-MTU probe (probes/pathmtu.py): count a worker's bulk bytes, answer with our MTU, send them back."""
        from ddpdoctor.probes.pathmtu import serve_bulk
        nic = nic_with_addr(self._nics, _plain(conn.getsockname()[0]))
        got = serve_bulk(conn, parts, ifname=nic.name if nic else "?", mtu=nic.mtu if nic else 0)
        if got is None:
            return
        event = {"from": clean_token(parts[2]), "addr": peer, "port": "bulk", "interface": nic.name if nic else "?",
                 "mtu": nic.mtu if nic else 0, "bytes": got, "asked": min(int(parts[3]), 1 << 24)}
        self._record(event)

    def _record(self, event: dict) -> None:
        with self.changed:
            if len(self.incoming) < MAX_INCOMING:
                self.incoming.append(event)
            else:
                self.dropped += 1
            self.changed.notify_all()
        if self._on_event:
            self._on_event(event)

    def _close_sockets(self) -> None:
        for s in list(self._socks):
            s.close()

    def close(self) -> None:
        """Stop answering and close both ports: nothing stays listening."""
        self._stop.set()
        self._thread.join(1.0)
        self._close_sockets()
        with self.changed:
            live = list(self._handlers)
        for t in live:
            t.join(2.5)  # handlers have a 2 s read timeout


def listen(port: int, *, expect: int | None, timeout: float, reply_host: str,
           on_event: Callable[[str, Worker], None] = lambda kind, w: None,
           port_range: tuple[int, int] | None = None, stop: Callable[[], str] | None = None) -> ListenResult:
    """Serve until `expect` workers completed both ports, `timeout` passed, or `stop()` names a
    reason (a signal): the result then still holds every arrival."""
    workers: dict[tuple[str, str], Worker] = {}
    t0 = time.monotonic()

    def record(ev: dict) -> None:
        key = (ev["from"], ev["addr"])
        if key not in workers and len(workers) >= MAX_WORKERS:
            return  # any peer may claim any name: a flood of names must not grow without bound
        w = workers.setdefault(key, Worker(ev["from"], ev["addr"], ev["interface"]))
        now = time.monotonic() - t0
        if ev["port"] == "rendezvous" and w.rdzv_at is None:
            w.rdzv_at = now
        elif ev["port"] == "ephemeral" and w.eph_at is None:
            w.eph_at = now
        elif ev["port"] == "bulk":
            w.bulk.append({"bytes": ev["bytes"], "asked": ev["asked"], "mtu": ev["mtu"], "interface": ev["interface"]})
        else:
            return
        on_event(ev["port"], w)

    server = ProbeServer(port, reply_host, port_range=port_range, on_event=None)
    seen = 0
    timed_out = False
    interrupted = ""
    drain_end: float | None = None
    try:
        with server.changed:
            while True:
                for ev in server.incoming[seen:]:
                    record(ev)
                del server.incoming[:]  # consumed: this server is ours alone, keep no per-connection memory
                seen = 0
                if expect is not None and sum(w.complete for w in workers.values()) >= expect:
                    # a worker's path-MTU probe (BULK) may still be in flight on its own connection: let the
                    # handlers that are running finish (bounded) so the report holds what they measured
                    if drain_end is None:
                        drain_end = min(t0 + timeout, time.monotonic() + DRAIN_S)
                    if not server.busy() or time.monotonic() >= drain_end:
                        break
                    server.changed.wait(0.05)   # a handler leaving does not notify: look again shortly
                    continue
                interrupted = stop() if stop else ""
                if interrupted:
                    break
                left = t0 + timeout - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                server.changed.wait(min(left, 0.2))
    finally:
        server.close()
    return ListenResult(port, server.eport, server.range, expect, time.monotonic() - t0, list(workers.values()),
                        timed_out, interrupted)
