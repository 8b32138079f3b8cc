"""`ddpdoctor network --listen`: the master side of the probe protocol (see handshake.py).

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

from ddpdoctor.handshake import PROTO, clean_token, read_line
from ddpdoctor.netfacts import read_port_range
from ddpdoctor.probes.nics import list_nics, nic_with_addr


class ListenError(Exception):
    """The listener could not start (port taken, no permission); the message says why."""


@dataclass
class Worker:
    host: str
    addr: str
    interface: str
    rdzv_at: float | None = None
    eph_at: float | None = None

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

    @property
    def ok(self) -> bool:
        if self.expect is None:
            return all(w.complete for w in self.workers)
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


def listen(port: int, *, expect: int | None, timeout: float, reply_host: str,
           on_event: Callable[[str, Worker], None] = lambda kind, w: None,
           port_range: tuple[int, int] | None = None) -> ListenResult:
    rng = port_range or read_port_range() or (32768, 60999)
    try:
        main = bind_listener(port)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ListenError(f"port {port} is already in use") from None
        raise ListenError(f"cannot listen on port {port}: {e.strerror or e}") from None
    try:
        eph = bind_ephemeral(rng)
    except ListenError:
        main.close()
        raise
    eport = eph.getsockname()[1]
    nics = list_nics()
    workers: dict[tuple[str, str], Worker] = {}
    lock = threading.Lock()
    t0 = time.monotonic()
    end = t0 + timeout
    me = clean_token(reply_host)

    def handle(conn: socket.socket, peer: str, ephemeral: bool) -> None:
        try:
            line = read_line(conn, 2.0)
            parts = line.split()
            if len(parts) != 3 or parts[0] != PROTO or parts[1] not in ("HELLO", "EPHEMERAL"):
                return  # not a ddpdoctor worker (a port scanner, nc, curl): say nothing
            host = clean_token(parts[2])
            local = _plain(conn.getsockname()[0])
            nic = nic_with_addr(nics, local)
            if parts[1] == "HELLO" and not ephemeral:
                conn.sendall(f"{PROTO} WELCOME {me} {eport} {rng[0]}-{rng[1]}\n".encode())
                kind = "rendezvous"
            elif parts[1] == "EPHEMERAL" and ephemeral:
                conn.sendall(f"{PROTO} OK {me}\n".encode())
                kind = "ephemeral"
            else:
                return
            with lock:
                w = workers.setdefault((host, peer), Worker(host, peer, nic.name if nic else "?"))
                now = time.monotonic() - t0
                if kind == "rendezvous" and w.rdzv_at is None:
                    w.rdzv_at = now
                elif kind == "ephemeral" and w.eph_at is None:
                    w.eph_at = now
                else:
                    return
            on_event(kind, w)
        except OSError:
            pass
        finally:
            conn.close()

    threads: list[threading.Thread] = []
    timed_out = False
    try:
        while True:
            with lock:
                done = expect is not None and sum(w.complete for w in workers.values()) >= expect
            if done:
                break
            left = end - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([main, eph], [], [], min(left, 0.2))
            for s in ready:
                try:
                    conn, peer = s.accept()
                except OSError:
                    continue
                conn.setblocking(True)
                t = threading.Thread(target=handle, args=(conn, _plain(peer[0]), s is eph), daemon=True)
                t.start()
                threads.append(t)
    finally:
        main.close()
        eph.close()
        for t in threads:
            t.join(2.5)  # handlers have a 2 s read timeout
    return ListenResult(port, eport, rng, expect, time.monotonic() - t0, list(workers.values()), timed_out)
