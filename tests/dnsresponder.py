"""A tiny authoritative DNS responder over UDP, for lab tests of slow resolvers.

    python tests/dnsresponder.py --bind 127.0.0.1 --delay 1.3 node1=198.18.4.1 node2=198.18.4.2

Answers A queries for the names given (AAAA: an empty NOERROR answer; any other name: NXDOMAIN;
with --rcode servfail|refused: that failure for every query),
each answer sent `--delay` seconds after its query arrived (one timer per query, so glibc's
parallel A + AAAA queries both arrive after `delay`, not 2 x delay). Prints "ready" once bound.
Only what glibc's stub resolver needs: one question per query, no EDNS, no TCP.
"""
from __future__ import annotations

import argparse
import socket
import struct
import sys
import threading

QTYPE_A, QTYPE_AAAA, QCLASS_IN = 1, 28, 1


def _qname(packet: bytes, off: int) -> tuple[str, int]:
    labels = []
    while True:
        n = packet[off]
        off += 1
        if n == 0:
            return ".".join(labels), off
        labels.append(packet[off:off + n].decode("ascii", "replace"))
        off += n


RCODES = {"noerror": 0, "servfail": 2, "refused": 5}


def answer(query: bytes, table: dict[str, str], rcode: int = 0) -> bytes | None:
    """The response to `query`, or None for a packet that is not a query we can parse.
    A non-zero `rcode` (SERVFAIL, REFUSED) answers every query with that failure."""
    if len(query) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or qd != 1:
        return None
    try:
        name, off = _qname(query, 12)
        qtype, qclass = struct.unpack("!HH", query[off:off + 4])
    except (IndexError, struct.error):
        return None
    question = query[12:off + 4]
    key = name.lower().rstrip(".")
    rd = flags & 0x0100
    if rcode:
        return struct.pack("!HHHHHH", qid, 0x8080 | rd | rcode, 1, 0, 0, 0) + question
    if key not in table:
        return struct.pack("!HHHHHH", qid, 0x8480 | rd | 3, 1, 0, 0, 0) + question  # NXDOMAIN
    answers = b""
    count = 0
    if qtype == QTYPE_A and qclass == QCLASS_IN:
        answers = struct.pack("!HHHIH", 0xC00C, QTYPE_A, QCLASS_IN, 60, 4) + socket.inet_aton(table[key])
        count = 1
    return struct.pack("!HHHHHH", qid, 0x8480 | rd, 1, count, 0, 0) + question + answers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=53)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--rcode", choices=sorted(RCODES), default="noerror", help="answer every query with this failure")
    ap.add_argument("names", nargs="*", help="name=ipv4")
    a = ap.parse_args(argv)
    table = dict(n.split("=", 1) for n in a.names)
    table = {k.lower(): v for k, v in table.items()}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((a.bind, a.port))
    print("ready", flush=True)
    while True:
        data, peer = s.recvfrom(4096)
        resp = answer(data, table, RCODES[a.rcode])
        if resp is None:
            continue
        t = threading.Timer(a.delay, s.sendto, args=(resp, peer))
        t.daemon = True
        t.start()


if __name__ == "__main__":
    sys.exit(main())
