"""Which peers a rank's TCP connections cannot deliver to: sockets holding unacknowledged data while the
kernel retransmits (/proc/<pid>/net/tcp{,6}, the rank's own network namespace; proc(5), tcp(7)).

When every rank waits in the same collective and none is elsewhere, a dropped or black-holed peer shows
here: its connections keep bytes in the send queue (tx_queue) with the retransmit timer running
(`tr` = 1) and a growing `retrnsmt` count. Read only while a rank has stopped moving (fd listing costs
≈2 µs a descriptor). Plain facts: local and remote addresses, no judgement.
"""
from __future__ import annotations

import ipaddress

from ddpdoctor.probes.proctable import socket_inodes


def _inodes(pid: int) -> set[str]:
    return socket_inodes(pid) or set()


def _addr(hexaddr: str) -> str:
    ip, _, _port = hexaddr.partition(":")
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # IPv6: four 32-bit words, each in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    a = ipaddress.IPv6Address(words)
    return str(a.ipv4_mapped or a)


def sockets(pid: int) -> dict[str, list[str]]:
    """{"local": [addresses of its established TCP sockets], "stuck": [remote addresses its sockets
    retransmit to with data unacknowledged]}."""
    inodes = _inodes(pid)
    local: set[str] = set()
    stuck: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                next(f, None)
                for line in f:
                    p = line.split()
                    if len(p) < 10 or p[9] not in inodes or p[3] != "01":  # 01: ESTABLISHED
                        continue
                    tx = int(p[4].split(":")[0], 16)
                    timer = p[5].split(":")[0]
                    retrans = int(p[6], 16)
                    la, ra = _addr(p[1]), _addr(p[2])
                    if la.startswith("127.") or la == "::1":
                        continue
                    local.add(la)
                    if tx > 0 and timer == "01" and retrans > 0:
                        stuck.add(ra)
        except OSError:
            continue
    return {"local": sorted(local), "stuck": sorted(stuck)}
