"""Where each rank's torch debug server (its "worker server") listens, read without importing torch.

A job that called `torch.distributed.debug.start_debug_server()` (torch >= 2.10) runs, in every rank, a C++
HTTP server on a thread named `pt_workerserver` (c10::setThreadName in control_plane/WorkerServer.cpp), bound
to `("::", 0)`, and registers `http://<hostname>:<port>` in the job's TCPStore (MASTER_ADDR:MASTER_PORT from
the rank's environment) under `debug_server/rank<RANK>` (torch/distributed/debug/__init__.py, _store.py).
So, in this order:

1. /proc: the rank has a `pt_workerserver` thread (no thread: no server, nothing registered either), and its
   one listening TCP socket on the IPv6 wildcard is the server (Gloo and NCCL listen on an interface's
   address, the job's store on MASTER_PORT, skipped) -> http://127.0.0.1:<port>, when the rank shares our
   network namespace;
2. the job's TCPStore, for the ranks /proc leaves ambiguous: read with the store's own wire protocol over a
   plain socket (below), so that neither `inspect --debug-server` nor `watch` has to import torch (1.5 s of
   CPU here, 15-40 s under load) for a key-value read;
3. torch's TCPStore client only if the store does not answer the handshake as torch 2.10-2.13's does (a later
   torch that changed the protocol).

The store protocol, as torch 2.13's client speaks it (captured between its TCPStore client and server, and
torch/csrc/distributed/c10d/TCPStore.cpp, TCPStoreBackend.hpp; integers in the host's byte order, which is
little-endian on every platform torch ships for): on connect VALIDATE (0x00, u32 0x3C85F7CE) and PING (0x0d,
u32 nonce, echoed back); CHECK (0x05, u64 key count, per key u64 length + bytes) -> u8 0 ready / 1 not ready;
GET (0x03, u64 length + key) -> u64 length + value. Keys carry the client's "/" prefix and PrefixStore's
"debug_server/". Only CHECK and GET are sent: nothing is written into the job's store, and GET is sent only
for a key CHECK found (a GET of a missing key would wait in the server).
"""
from __future__ import annotations

import ipaddress
import os
import socket
import struct
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ddpdoctor.probes import dns

THREAD_NAME = "pt_workerserver"   # c10::setThreadName in WorkerServer.cpp
PREFIX = "debug_server"           # torch.distributed.debug._store.tcpstore_client's default prefix
START_LINE = "from torch.distributed.debug import start_debug_server; start_debug_server()"
START_HELP = (f"to start it, add to every rank after init_process_group: `{START_LINE}` (torch >= 2.10; "
              "in torch 2.13 rank 0 also needs `pip install tabulate`, which its web page imports)")

_VALIDATE, _GET, _CHECK, _PING = 0x00, 0x03, 0x05, 0x0D
_MAGIC = 0x3C85F7CE
_URL_MAX = 4096   # a registered URL is http://<hostname>:<port>; anything longer is not one


class StoreProtocolError(Exception):
    """The peer did not answer as torch 2.10-2.13's TCPStore does."""


@dataclass
class Found:
    """rank -> URL for the ranks whose server was found; `serving`: the ranks with a pt_workerserver thread;
    `why`: one line when no URL was found (what was looked for; START_HELP says how to start a server)."""
    urls: dict[int, str] = field(default_factory=dict)
    serving: list[int] = field(default_factory=list)
    store: str = ""   # "host:port" when the job's store was read
    why: str = ""


def has_debug_server(pid: int, root: str = "/proc") -> bool:
    """The process runs torch's worker server: one of its threads is named pt_workerserver."""
    try:
        tids = os.listdir(f"{root}/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"{root}/{pid}/task/{tid}/comm") as f:
                if f.read(32).strip() == THREAD_NAME:
                    return True
        except OSError:
            continue
    return False


def local_url(pid: int, skip_ports: Iterable[int] = (), root: str = "/proc") -> str | None:
    """The worker server's URL from /proc alone: the one TCP socket the rank listens on at the IPv6 wildcard
    address (`_WorkerServer("::", 0)`). None when there is not exactly one, or the rank is in another network
    namespace than ours (127.0.0.1 is then not the rank's loopback)."""
    from ddpdoctor.probes import proctable
    try:
        if os.readlink(f"{root}/{pid}/ns/net") != os.readlink(f"{root}/self/ns/net"):
            return None
    except OSError:
        return None
    inodes = proctable.socket_inodes(pid, root)
    if inodes is None:
        return None
    skip = {int(p) for p in skip_ports}
    ports = set()
    try:
        with open(f"{root}/{pid}/net/tcp6") as f:
            next(f, None)
            for line in f:
                col = line.split()
                if len(col) < 10 or col[3] != "0A" or col[9] not in inodes:
                    continue
                addr, _, port = col[1].partition(":")
                if addr == "0" * 32 and int(port, 16) not in skip:
                    ports.add(int(port, 16))
    except (OSError, ValueError):
        return None
    return f"http://127.0.0.1:{ports.pop()}" if len(ports) == 1 else None


class HTTPError(Exception):
    """The worker server answered with another status than 200 (a redirect included: never followed)."""

    def __init__(self, code: int):
        super().__init__(f"HTTP {code}")
        self.code = code


_HEAD_MAX = 64 << 10


def addresses(host: str, timeout: float) -> tuple[tuple[str, ...], str]:
    """(addresses, "") of a host: an address as it is, a name looked up within `timeout` (getaddrinfo has no
    timeout of its own, and a resolver that never answers held a caller for glibc's timeout × attempts: 40 s
    measured, tests/test_inspect_store_lookup_lab.py); ((), why) when it did not resolve in time. The lookup
    is probes/dns.py's: a daemon thread, left behind if it never returns."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return (host,), ""
    except ValueError:
        res = dns.resolve(host, timeout=timeout)
        return res.addrs, res.error


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    """socket.create_connection with the name's lookup bounded by `timeout` too (addresses()), its addresses
    tried in order."""
    addrs, why = addresses(host, timeout)
    if not addrs:
        raise OSError(f"cannot look up {host!r}: {why}")
    err: OSError | None = None
    for a in addrs:
        try:
            return socket.create_connection((a, port), timeout=timeout)
        except OSError as e:
            err = e
    raise err if err is not None else OSError(f"no address for {host!r}")


def http_post(url: str, target: str, *, timeout: float, cap: int) -> bytes:
    """POST <url><target> with an empty body; the answer's body (status 200 only, HTTPError otherwise). The
    whole answer within `timeout` (a server that trickles bytes is cut off: TimeoutError), at most `cap`
    bytes (ValueError). Plain HTTP/1.1 over a socket, `Connection: close`: the worker server is cpp-httplib
    (torch/csrc/distributed/c10d/control_plane/WorkerServer.cpp), its handlers answer with Content-Length;
    chunked and read-to-close bodies are read too. Not urllib/http.client: they import ssl and hashlib
    (OpenSSL's libcrypto), ≈6 MiB of RSS for a plaintext POST to a rank (docs/watch.md: memory)."""
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or not u.hostname or u.port is None:
        raise ValueError(f"not a worker server's URL: {url[:100]!r}")
    end = time.monotonic() + timeout
    with _connect(u.hostname, u.port, timeout) as s:
        s.sendall(f"POST {target} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Length: 0\r\n"
                  "Connection: close\r\n\r\n".encode())
        buf = bytearray()

        def more() -> bool:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"answer not complete within {timeout:g} s")
            s.settimeout(left)
            b = s.recv(1 << 16)
            buf.extend(b)
            return bool(b)

        while (i := buf.find(b"\r\n\r\n")) < 0:
            if len(buf) > _HEAD_MAX or not more():
                raise ValueError("no HTTP header in the answer")
        head, body = bytes(buf[:i]).decode("latin-1").split("\r\n"), buf[i + 4:]
        status = head[0].split(" ", 2)
        if len(status) < 2 or not status[0].startswith("HTTP/1.") or not status[1].isdigit():
            raise ValueError(f"not an HTTP answer: {head[0][:80]!r}")
        if int(status[1]) != 200:
            raise HTTPError(int(status[1]))
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        buf = body
        if fields.get("transfer-encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                while (j := buf.find(b"\r\n")) < 0:
                    if len(buf) > _HEAD_MAX or not more():
                        raise ValueError("a chunked answer cut short")
                size = int(bytes(buf[:j]).split(b";")[0] or b"x", 16)
                if size == 0:
                    return bytes(out)
                if len(out) + size > cap:
                    raise ValueError(f"answer larger than {cap >> 10} KiB")
                while len(buf) < j + 2 + size + 2:
                    if not more():
                        raise ValueError("a chunked answer cut short")
                out += buf[j + 2:j + 2 + size]
                del buf[:j + 2 + size + 2]
        n = fields.get("content-length")
        if n is not None:
            if not n.isdigit():
                raise ValueError(f"Content-Length {n[:20]!r}")
            if int(n) > cap:
                raise ValueError(f"answer larger than {cap >> 10} KiB")
            while len(buf) < int(n):
                if not more():
                    raise ValueError("the answer was cut short")
            return bytes(buf[:int(n)])
        while more():  # no length: the body ends when the server closes
            if len(buf) > cap:
                raise ValueError(f"answer larger than {cap >> 10} KiB")
        return bytes(buf)


# ----------------------------------------------------------------------------- the job's store, no torch

def _recv(sock: socket.socket, n: int, end: float) -> bytes:
    buf = b""
    while len(buf) < n:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("the job's store did not answer in time")
        sock.settimeout(left)
        b = sock.recv(n - len(buf))
        if not b:
            raise StoreProtocolError("the store closed the connection")
        buf += b
    return buf


def _key(k: str) -> bytes:
    b = k.encode()
    return struct.pack("<Q", len(b)) + b


def store_get(host: str, port: int, keys: list[str], timeout: float) -> dict[str, bytes]:
    """The values of those keys that the job's TCPStore holds (read-only: CHECK, then GET of what is there).
    Raises OSError/TimeoutError (unreachable, slow) or StoreProtocolError (not the protocol we know)."""
    end = time.monotonic() + timeout
    with _connect(host, port, timeout) as s:
        nonce = int.from_bytes(os.urandom(4), "little")
        s.sendall(bytes([_VALIDATE]) + struct.pack("<I", _MAGIC) + bytes([_PING]) + struct.pack("<I", nonce))
        if struct.unpack("<I", _recv(s, 4, end))[0] != nonce:
            raise StoreProtocolError("the store did not echo the ping")
        full = [f"/{k}" for k in keys]
        s.sendall(b"".join(bytes([_CHECK]) + struct.pack("<Q", 1) + _key(k) for k in full))  # one round trip
        ready = _recv(s, len(full), end)
        if any(b not in (0, 1) for b in ready):
            raise StoreProtocolError("CHECK answered neither ready nor not ready")
        have = [k for k, b in zip(keys, ready) if b == 0]
        s.sendall(b"".join(bytes([_GET]) + _key(f"/{k}") for k in have))
        out = {}
        for k in have:
            n = struct.unpack("<Q", _recv(s, 8, end))[0]
            if n > _URL_MAX:
                raise StoreProtocolError(f"a value of {n} bytes for {k}")
            out[k] = _recv(s, n, end)
        return out


def _torch_store_get(host: str, port: int, keys: list[str], timeout: float) -> dict[str, bytes]:
    """torch's own client: only when the store spoke another protocol than torch 2.13's (imports torch)."""
    import datetime
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    from torch.distributed import TCPStore

    store = TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=max(0.5, timeout)))
    return {k: store.get(k) for k in keys if store.check([k])}


def store_urls(host: str, port: int, ranks: Iterable[int], timeout: float) -> dict[int, str]:
    """rank -> the URL it registered in the job's store (ranks that registered none are left out)."""
    ranks = sorted(set(ranks))
    keys = [f"{PREFIX}/rank{r}" for r in ranks]
    try:
        got = store_get(host, port, keys, timeout)
    except StoreProtocolError:
        got = _torch_store_get(host, port, keys, timeout)
    out = {}
    for r, k in zip(ranks, keys):
        url = got.get(k, b"").decode("utf-8", "replace")
        u = urllib.parse.urlsplit(url)
        try:
            if u.scheme == "http" and u.hostname and u.port:
                out[r] = url.rstrip("/")
        except ValueError:  # a port out of range: not a URL torch wrote
            continue
    return out


# ----------------------------------------------------------------------------- what inspect and watch call

def _get(r: Any, name: str) -> Any:
    return r.get(name) if isinstance(r, Mapping) else getattr(r, name, None)


def store_target(ranks: Iterable[Any]) -> tuple[str, int, int] | None:
    """(MASTER_ADDR, MASTER_PORT, WORLD_SIZE) as the ranks were started with (their environ): where
    start_debug_server registered the URLs."""
    for r in ranks:
        env = _get(r, "env") or {}
        try:
            return env["MASTER_ADDR"], int(env["MASTER_PORT"]), int(env.get("WORLD_SIZE") or _get(r, "world_size") or 0)
        except (KeyError, ValueError, TypeError):
            continue
    return None


def _ranks(rs: list[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ",".join(map(str, rs))


def find(ranks: Iterable[Any], timeout: float = 2.0, *, world: bool = False, root: str = "/proc") -> Found:
    """Each rank's worker server (`ranks`: inspect's rank dicts or watch's Rank objects: rank, pid, env,
    world_size, and `host` when another node sampled it): /proc for the ranks on this host, the job's store
    for what /proc leaves open and, with `world`, for the ranks of the world that are not here (other nodes).
    Never raises: `why` says what failed."""
    ranks = [r for r in ranks if type(_get(r, "rank")) is int and type(_get(r, "pid")) is int]
    target = store_target(ranks)
    me = socket.gethostname()  # inspect --gather's ranks carry the host that sampled them; their pids are its
    ranks = [r for r in ranks if _get(r, "host") in (None, me)]
    out = Found()
    out.serving = sorted(_get(r, "rank") for r in ranks if has_debug_server(_get(r, "pid"), root))
    if ranks and not out.serving:  # the job's code calls start_debug_server in every rank or in none: no store read
        looked = ", ".join(f"{_get(r, 'rank')} (pid {_get(r, 'pid')})" for r in sorted(ranks, key=lambda r: _get(r, "rank")))
        out.why = f"no rank runs torch's debug server: no thread named {THREAD_NAME} in rank {looked}"
        return out
    for r in ranks:
        if _get(r, "rank") not in out.serving:
            continue
        env = _get(r, "env") or {}
        skip = [int(env["MASTER_PORT"])] if str(env.get("MASTER_PORT", "")).isdigit() else []
        url = local_url(_get(r, "pid"), skip, root)
        if url:
            out.urls[_get(r, "rank")] = url
    missing = [r for r in out.serving if r not in out.urls]
    here = {_get(r, "rank") for r in ranks}
    away = [r for r in range(min(target[2], 1 << 16)) if r not in here] if world and target else []
    if not missing and not away:
        if not out.urls:
            out.why = "no rank of the job on this node, and the ranks' environment names no job store"
        return out
    lost = (f"{_ranks(missing)} {'runs' if len(missing) == 1 else 'run'} torch's debug server (a {THREAD_NAME} "
            "thread) but /proc shows no single listener of it on [::]") if missing else \
        f"{_ranks(away)} {'is' if len(away) == 1 else 'are'} not on this node"
    if target is None:
        out.why = f"{lost}, and the ranks' environment names no MASTER_ADDR/MASTER_PORT (the job's store)"
        return out
    host, port, _ = target
    out.store = f"{host}:{port}"
    try:
        stored = store_urls(host, port, missing + away, timeout)
    except Exception as e:  # noqa: BLE001 - refused, timed out, torch's DistNetworkError: one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        out.why = f"{lost}, and the job's store at {host}:{port} could not be read: {msg[:160]}"
        return out
    out.urls.update(stored)
    if missing and not any(r in stored for r in missing):
        out.why = f"{lost}, and the job's store at {host}:{port} holds no {PREFIX}/rank<N> for {'it' if len(missing) == 1 else 'them'}"
    return out
