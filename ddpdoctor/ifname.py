"""The two interface-selection grammars, emulated exactly.

NCCL_SOCKET_IFNAME (NCCL src/misc/socket.cc, findInterfaces/matchIfList): a comma-separated list
of name *prefixes*; a leading `^` excludes them, then a leading `=` makes them exact names. Values
of one character are ignored (`strlen(env) > 1`). Interfaces are taken in getifaddrs order, IPv6
loopback skipped; the interface's up/down state is *not* consulted.

Unset, NCCL tries `ib*`, then anything but `docker*`/`lo*`, then `docker*`, then `lo*`; the
bootstrap uses the first match.

GLOO_SOCKET_IFNAME (torch ProcessGroupGloo): a comma-separated list of exact interface names, each
one becomes a Gloo device; `^` and `=` mean nothing to it. Unset, Gloo binds the address the
hostname resolves to (first one it can bind), falling back to loopback.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ddpdoctor.probes.nics import Nic


def parse_nccl(spec: str) -> tuple[bool, bool, tuple[str, ...]]:
    """-> (exclude, exact, names)."""
    exclude = spec.startswith("^")
    if exclude:
        spec = spec[1:]
    exact = spec.startswith("=")
    if exact:
        spec = spec[1:]
    # NCCL's parseStringList also accepts `name:port` (for IB HCAs); the port is irrelevant here.
    names = tuple(n.split(":", 1)[0] for n in spec.split(",") if n.split(":", 1)[0])
    return exclude, exact, names


def nccl_selects(spec: str, ifname: str) -> bool:
    exclude, exact, names = parse_nccl(spec)
    hit = any((ifname == n) if exact else ifname.startswith(n) for n in names)
    return hit != exclude


def _nccl_candidates(nics: Sequence[Nic], family: str | None) -> list[Nic]:
    """Interfaces with an address in NCCL's walk order: IPv4 entries first, then IPv6 (getifaddrs)."""
    order: list[Nic] = []
    if family in (None, "AF_INET"):
        order += [n for n in nics if n.ipv4]
    if family in (None, "AF_INET6"):
        order += [n for n in nics if any(a != "::1" for a in n.ipv6) and n not in order]
    return order


def nccl_matches(spec: str, nics: Sequence[Nic], family: str | None = None) -> list[Nic]:
    return [n for n in _nccl_candidates(nics, family) if nccl_selects(spec, n.name)]


def nccl_default_choice(nics: Sequence[Nic], env: dict[str, str]) -> tuple[Nic | None, str]:
    """What NCCL's bootstrap picks with NCCL_SOCKET_IFNAME unset -> (nic, rule that picked it)."""
    family = env.get("NCCL_SOCKET_FAMILY") if env.get("NCCL_SOCKET_FAMILY") in ("AF_INET", "AF_INET6") else None
    for rule in ("ib", "^docker,lo", "docker", "lo"):
        found = nccl_matches(rule, nics, family)
        if found:
            return found[0], rule
    return None, ""


def nccl_exact(names: Iterable[str]) -> str:
    """NCCL spelling that selects exactly these interfaces (no prefix surprises: eth1 vs eth10)."""
    return "=" + ",".join(names)


def parse_gloo(spec: str) -> tuple[str, ...]:
    # torch splits the value with c10d::split (std::getline on ','): every piece is kept verbatim,
    # spaces included, so "eth0, eth1" asks Gloo for an interface named " eth1" and process-group
    # creation fails with "Unable to find address for:  eth1" (checked with torch 2.13, gloo device.cc).
    return tuple(n for n in spec.split(",") if n)


def spaced_names(spec: str) -> tuple[str, ...]:
    """Names in a *_SOCKET_IFNAME list that carry whitespace. Neither NCCL (parseStringList keeps every
    character but ',' and ':') nor torch's Gloo (c10d::split) trims them, so such a name selects nothing."""
    body = spec.lstrip("^=") if spec[:1] in "^=" else spec
    return tuple(n for n in body.split(",") if n.strip() and n != n.strip())


def without_spaces(spec: str) -> str:
    """The same list with the whitespace around each name removed (NCCL's `^`/`=` prefix and `:port` kept)."""
    head = ""
    while spec[:1] in ("^", "=") and spec:
        head, spec = head + spec[0], spec[1:].lstrip()
    return head + ",".join(p.strip() for p in spec.split(",") if p.strip())
