"""Name resolution facts: forward and reverse lookups through the system resolver, timed."""
from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass, field

from ddpdoctor.probes.timeouts import ProbeTimeout, call_with_timeout


@dataclass(frozen=True)
class Resolution:
    name: str
    addrs: tuple[str, ...] = ()   # in getaddrinfo order, de-duplicated
    error: str = ""               # resolver error text, "" when it resolved
    duration_s: float = 0.0
    timed_out: bool = False
    temporary: bool = False       # the resolver answered with a failure (SERVFAIL, REFUSED): no verdict on the name

    @property
    def ok(self) -> bool:
        return bool(self.addrs)

    @property
    def no_answer(self) -> bool:
        """No verdict on the name: the resolver was silent or failed. Only NXDOMAIN / NODATA
        (EAI_NONAME, EAI_NODATA) say that a name does not resolve; a DNS outage must not read as
        one (a prolog would drain every node it runs on during the outage)."""
        return self.timed_out or self.temporary

    @property
    def ipv4(self) -> tuple[str, ...]:
        return tuple(a for a in self.addrs if ":" not in a)


@dataclass(frozen=True)
class Reverse:
    addr: str
    names: tuple[str, ...] = field(default_factory=tuple)
    error: str = ""
    duration_s: float = 0.0


# The answers that say a name has no address. glibc's res_query maps the DNS rcode to h_errno
# (NXDOMAIN -> HOST_NOT_FOUND, NOERROR without data -> NO_DATA, SERVFAIL -> TRY_AGAIN, REFUSED and
# the rest -> NO_RECOVERY) and getaddrinfo turns those into EAI_NONAME / EAI_NODATA / EAI_AGAIN /
# EAI_FAIL (glibc resolv/res_query.c, nss/getaddrinfo.c). Everything that is not a negative answer
# (EAI_AGAIN, EAI_FAIL, EAI_SYSTEM, EAI_MEMORY, ...) is a failure of the resolver, not of the name.
NEGATIVE_ANSWERS = frozenset(getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA", "EAI_ADDRFAMILY")
                             if hasattr(socket, n))


def _gai(name: str, family: int) -> list:
    # SOCK_STREAM: one entry per address instead of one per socket type.
    return socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)


def resolve(name: str, *, timeout: float = 2.0, family: int = socket.AF_UNSPEC) -> Resolution:
    """getaddrinfo(name) as torch's c10d and Gloo call it, with a timeout it does not have."""
    t0 = time.monotonic()
    try:
        infos = call_with_timeout(_gai, name, family, timeout=timeout)
    except ProbeTimeout as e:
        return Resolution(name, (), f"resolver gave {e}", time.monotonic() - t0, True)
    except socket.gaierror as e:
        return Resolution(name, (), f"{e.strerror or e} (gaierror {e.errno})", time.monotonic() - t0,
                          temporary=e.errno not in NEGATIVE_ANSWERS)
    except (OSError, UnicodeError, ValueError) as e:
        return Resolution(name, (), str(e), time.monotonic() - t0)
    addrs: list[str] = []
    for info in infos:
        a = info[4][0].split("%", 1)[0]
        if a not in addrs:
            addrs.append(a)
    return Resolution(name, tuple(addrs), "", time.monotonic() - t0)


def _gai_c10d(name: str) -> list:
    # The hints of c10d's SocketConnectOp::tryConnect(AF_INET6) (torch/csrc/distributed/c10d/socket.cpp):
    # with SocketOptions::prefer_ipv6 (true by default) a client asks for AF_INET6 with
    # AI_V4MAPPED | AI_ALL, so IPv6 and v4-mapped IPv4 addresses come in one list, in the order the
    # system's getaddrinfo sorts them (RFC 6724 and /etc/gai.conf), and c10d tries them in that order.
    return socket.getaddrinfo(name, None, socket.AF_INET6, socket.SOCK_STREAM, 0, socket.AI_V4MAPPED | socket.AI_ALL)


def c10d_order(name: str, *, timeout: float = 2.0) -> Resolution:
    """The addresses of `name` in the order torch's c10d store client tries them (v4-mapped shown as IPv4).

    When AF_INET6 gives nothing (no IPv6 on this host), c10d falls back to AF_INET: plain order.
    A silently dropped address stops c10d there: its connect waits out the whole timeout.
    """
    t0 = time.monotonic()
    try:
        infos = call_with_timeout(_gai_c10d, name, timeout=timeout)
    except ProbeTimeout as e:
        return Resolution(name, (), f"resolver gave {e}", time.monotonic() - t0, True)
    except (OSError, UnicodeError, ValueError):
        return resolve(name, timeout=timeout, family=socket.AF_INET)
    addrs: list[str] = []
    for info in infos:
        a = info[4][0].split("%", 1)[0]
        if a.startswith("::ffff:") and "." in a:
            a = a[7:]
        if a not in addrs:
            addrs.append(a)
    return Resolution(name, tuple(addrs), "", time.monotonic() - t0)


def reverse(addr: str, *, timeout: float = 2.0) -> Reverse:
    t0 = time.monotonic()
    try:
        host, aliases, _ = call_with_timeout(socket.gethostbyaddr, addr, timeout=timeout)
    except ProbeTimeout as e:
        return Reverse(addr, (), f"resolver gave {e}", time.monotonic() - t0)
    except (socket.herror, socket.gaierror) as e:
        return Reverse(addr, (), f"{e.strerror or e}", time.monotonic() - t0)
    except OSError as e:
        return Reverse(addr, (), str(e), time.monotonic() - t0)
    return Reverse(addr, (host, *aliases), "", time.monotonic() - t0)


def fqdn(name: str, *, timeout: float = 2.0) -> str:
    try:
        return call_with_timeout(socket.getfqdn, name, timeout=timeout)
    except (ProbeTimeout, OSError):
        return name


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False
