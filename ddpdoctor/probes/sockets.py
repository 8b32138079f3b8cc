"""TCP and routing facts: connect probes classified by outcome, the kernel's route choice, binds."""
from __future__ import annotations

import errno
import socket
import time
from dataclasses import dataclass

# How a TCP connect ended. "filtered" means no answer at all before the timeout: a firewall DROP
# (a REJECT rule answers, which shows as "refused").
OPEN, REFUSED, FILTERED, UNREACHABLE, NO_ROUTE, ERROR = "open", "refused", "filtered", "unreachable", "no-route", "error"


@dataclass(frozen=True)
class TcpProbe:
    addr: str
    port: int
    state: str
    latency_s: float
    error: str = ""
    local_addr: str = ""  # the source address the kernel picked, when connected


def family_of(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def tcp_probe(addr: str, port: int, *, timeout: float = 2.0) -> TcpProbe:
    t0 = time.monotonic()
    s = socket.socket(family_of(addr), socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((addr, port))
        local = s.getsockname()[0]
        return TcpProbe(addr, port, OPEN, time.monotonic() - t0, "", local)
    except socket.timeout:
        return TcpProbe(addr, port, FILTERED, time.monotonic() - t0, f"no answer within {timeout:g} s")
    except OSError as e:
        state = {
            errno.ECONNREFUSED: REFUSED,
            errno.EHOSTUNREACH: UNREACHABLE,
            errno.ENETUNREACH: NO_ROUTE,
            errno.ETIMEDOUT: FILTERED,
        }.get(e.errno or 0, ERROR)
        return TcpProbe(addr, port, state, time.monotonic() - t0, e.strerror or str(e))
    except (OverflowError, ValueError, TypeError) as e:  # a port from a peer out of 0-65535: not a crash
        return TcpProbe(addr, port, ERROR, time.monotonic() - t0, f"invalid port {port!r}: {e}")
    finally:
        s.close()


@dataclass(frozen=True)
class Route:
    dest: str
    src_addr: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.src_addr)


def route_to(addr: str, port: int = 9) -> Route:
    """The source address the kernel would use for `addr`, without sending a packet.

    A connected UDP socket makes the kernel do the route lookup (like `ip route get`) and
    `getsockname` tells its source address; no datagram leaves the host.
    """
    s = socket.socket(family_of(addr), socket.SOCK_DGRAM)
    try:
        s.connect((addr, port))
        return Route(addr, s.getsockname()[0].split("%", 1)[0])
    except OSError as e:
        return Route(addr, "", e.strerror or str(e))
    finally:
        s.close()


@dataclass(frozen=True)
class BindResult:
    port: int
    free: bool
    error: str = ""


def try_bind(port: int, host: str = "") -> BindResult:
    """Can a server bind `port` the way c10d's TCPStore does (dual-stack [::] first, SO_REUSEADDR)?"""
    attempts = [(socket.AF_INET6, host or "::"), (socket.AF_INET, host or "0.0.0.0")] if ":" in (host or ":") \
        else [(socket.AF_INET, host)]
    last = ""
    for fam, h in attempts:
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
        except OSError as e:  # no IPv6 on this host: try the next family
            last = e.strerror or str(e)
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((h, port))
            s.listen(1)
            return BindResult(port, True)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return BindResult(port, False, e.strerror or "address already in use")
            last = e.strerror or str(e)
        finally:
            s.close()
    return BindResult(port, True, last)  # no family could even try: nothing shows the port as taken


def read_port_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int] | None:
    """The kernel's ephemeral port range (lo, hi): where Gloo and NCCL listen after rendezvous; None if unreadable."""
    try:
        with open(path) as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return None
