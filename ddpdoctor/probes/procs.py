"""Which process holds a TCP port (like `ss -ltnp 'sport = :PORT'`)."""
from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class PortHolder:
    pid: int | None
    name: str
    cmdline: str
    laddr: str


def listeners_on(port: int) -> list[PortHolder]:
    out = []
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return out
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
            name, cmd = "?", ""
            if c.pid:
                try:
                    p = psutil.Process(c.pid)
                    name, cmd = p.name(), " ".join(p.cmdline())[:200]
                except (psutil.Error, OSError):
                    pass
            out.append(PortHolder(c.pid, name, cmd, f"{c.laddr.ip}:{c.laddr.port}"))
    return out
