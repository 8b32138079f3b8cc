"""The worker side of the ddpdoctor probe protocol (the master side is ddpdoctor/peerprobe/server.py).

A worker opens the rendezvous port and says `DDPDOCTOR/1 HELLO <host>`; a `ddpdoctor network
--listen` answers `DDPDOCTOR/1 WELCOME <host> <eport> <lo>-<hi>`, naming a second port it holds open
from its ephemeral range <lo>-<hi>. The worker then says `DDPDOCTOR/1 EPHEMERAL <host>` on that port and gets
`DDPDOCTOR/1 OK <host>`. The answer tells the worker it reached ddpdoctor and not some other
service, and the second port tests the path Gloo and NCCL really use after rendezvous.
"""
from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass

from ddpdoctor.probes import sockets

PROTO = "DDPDOCTOR/1"
MAX_LINE = 512
_TOKEN = re.compile(r"^[A-Za-z0-9._-]{1,253}$")
_PORT = re.compile(r"^[0-9]{1,5}$")


def clean_token(s: str) -> str:
    """Hostnames travel in the protocol: keep them to a safe alphabet."""
    return s if _TOKEN.match(s) else "?"


@dataclass(frozen=True)
class Hello:
    is_ddpdoctor: bool
    peer_host: str = ""
    eport: int = 0
    eport_range: tuple[int, int] | None = None  # the master's ip_local_port_range
    banner: str = ""  # what a non-ddpdoctor service said, if anything
    latency_s: float = 0.0
    error: str = ""


def read_line(sock: socket.socket, timeout: float) -> str:
    """One line of at most MAX_LINE bytes, or what arrived before the timeout / close."""
    sock.settimeout(timeout)
    buf = b""
    end = time.monotonic() + timeout
    while b"\n" not in buf and len(buf) < MAX_LINE:
        left = end - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(MAX_LINE - len(buf))
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\n", 1)[0].decode("ascii", "replace").strip()


def _exchange(addr: str, port: int, line: str, timeout: float) -> tuple[str, float, str]:
    t0 = time.monotonic()
    s = socket.socket(sockets.family_of(addr), socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((addr, port))
        s.sendall((line + "\n").encode("ascii"))
        reply = read_line(s, timeout)
        return reply, time.monotonic() - t0, ""
    except OSError as e:
        return "", time.monotonic() - t0, e.strerror or str(e)
    finally:
        s.close()


def hello(addr: str, port: int, me: str, *, timeout: float = 2.0) -> Hello:
    reply, dt, err = _exchange(addr, port, f"{PROTO} HELLO {clean_token(me)}", timeout)
    parts = reply.split()
    # The peer is untrusted: ports must be ASCII digits in 1-65535 (str.isdigit takes '²'; connect()
    # raises OverflowError, not OSError, for 70000), and a range must hold the port it offers.
    if (len(parts) in (4, 5) and parts[0] == PROTO and parts[1] == "WELCOME" and _PORT.match(parts[3])
            and 1 <= int(parts[3]) <= 65535):
        eport = int(parts[3])
        rng = None
        m = re.match(r"^([0-9]{1,5})-([0-9]{1,5})$", parts[4]) if len(parts) == 5 else None
        if m and 1 <= int(m.group(1)) <= eport <= int(m.group(2)) <= 65535:
            rng = (int(m.group(1)), int(m.group(2)))
        return Hello(True, clean_token(parts[2]), eport, rng, "", dt)
    if len(parts) >= 2 and parts[0] == PROTO and parts[1] == "WELCOME":
        return Hello(False, "", 0, None, reply[:120], dt, f"malformed WELCOME (bad port): {reply[:60]!r}")
    return Hello(False, "", 0, None, reply[:120], dt, err)


def ephemeral(addr: str, eport: int, me: str, *, timeout: float = 2.0) -> sockets.TcpProbe:
    """Probe the master's offered ephemeral port; classified like any TCP probe."""
    probe = sockets.tcp_probe(addr, eport, timeout=timeout)
    if probe.state != sockets.OPEN:
        return probe
    reply, dt, err = _exchange(addr, eport, f"{PROTO} EPHEMERAL {clean_token(me)}", timeout)
    if reply.startswith(f"{PROTO} OK"):
        return sockets.TcpProbe(addr, eport, sockets.OPEN, dt, "", probe.local_addr)
    return sockets.TcpProbe(addr, eport, sockets.ERROR, dt, err or f"unexpected answer {reply[:60]!r}")
