"""Network interfaces as psutil reports them (getifaddrs order, which NCCL also walks)."""
from __future__ import annotations

import socket
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Nic:
    name: str
    is_up: bool
    ipv4: tuple[str, ...]
    ipv6: tuple[str, ...]
    mtu: int
    speed_mbps: int  # 0 when the driver does not say (veth, bridges)
    netmasks: tuple[str, ...] = ()

    @property
    def addrs(self) -> tuple[str, ...]:
        return self.ipv4 + self.ipv6

    @property
    def is_loopback(self) -> bool:
        return self.name == "lo" or any(a.startswith("127.") for a in self.ipv4) or "::1" in self.ipv6


def list_nics() -> list[Nic]:
    addrs = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    out = []
    for name, entries in addrs.items():
        v4 = tuple(e.address for e in entries if e.family == socket.AF_INET)
        masks = tuple(e.netmask or "" for e in entries if e.family == socket.AF_INET)
        v6 = tuple(e.address.split("%", 1)[0] for e in entries if e.family == socket.AF_INET6)
        st = stats.get(name)
        out.append(Nic(name, bool(st and st.isup), v4, v6, st.mtu if st else 0, st.speed if st else 0, masks))
    # Interfaces with no address at all still matter (a *_SOCKET_IFNAME may name them).
    for name, st in stats.items():
        if name not in addrs:
            out.append(Nic(name, st.isup, (), (), st.mtu, st.speed))
    return out


def nic_with_addr(nics: list[Nic], addr: str) -> Nic | None:
    for n in nics:
        if addr in n.addrs:
            return n
    return None
