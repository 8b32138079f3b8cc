"""Input validation for hosts, ports and durations: one clear sentence per problem.

Names reach resolvers and appear in suggested commands, so only RFC 1123 host names and IP
literals pass; anything with shell metacharacters, spaces or control characters is refused.
"""
from __future__ import annotations

import ipaddress
import re


class BadInput(ValueError):
    """Bad user input: the CLI prints it on one line and exits 2."""


_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")  # '_' is seen in real /etc/hosts and k8s names


def validate_host(value: str, *, allow_ipv6: bool = False) -> str:
    if value is None or value == "":
        raise BadInput("empty host name")
    if len(value) > 253:
        raise BadInput(f"host name too long ({len(value)} characters, at most 253)")
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.version == 6 and not allow_ipv6:
            raise BadInput(f"{value!r} is an IPv6 literal; give a host name that resolves to it "
                           "(torchrun's host:port endpoints and ddpdoctor's probes take IPv4 or names)")
        return value
    if ":" in value or value.startswith("["):
        raise BadInput(f"{value!r} is not a valid host name" + ("" if allow_ipv6 else " (IPv6 literals are not supported)"))
    name = value[:-1] if value.endswith(".") else value
    if re.fullmatch(r"[\d.]+", name):
        raise BadInput(f"{value!r} is not a valid IPv4 address")
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "-._"))})
    if bad:
        shown = "".join(bad).encode("unicode_escape").decode("ascii")
        raise BadInput(f"{value!r} is not a valid host name (characters not allowed: {shown})")
    for label in name.split("."):
        if not _LABEL.match(label):
            raise BadInput(f"{value!r} is not a valid host name (bad label {label!r})")
    return value


def validate_port(value, *, allow_zero: bool = False) -> int:
    try:
        port = int(str(value).strip(), 10)
    except (TypeError, ValueError):
        raise BadInput(f"port {value!r} is not a number") from None
    lo = 0 if allow_zero else 1
    if not lo <= port <= 65535:
        raise BadInput(f"port {port} is out of range ({lo}-65535)")
    return port


def validate_seconds(value: float, what: str, *, minimum: float = 0.05, maximum: float = 86400) -> float:
    if not (minimum <= value <= maximum):
        raise BadInput(f"{what} {value:g} s is out of range ({minimum:g}-{maximum:g} s)")
    return value
