"""Memory of `network --listen` after many connections (issue 10: finished handlers were kept).

    PYTHONPATH=. python benchmarks/bench_listen_memory.py [N]

Starts the probe server in this process, opens N connections that each send one junk line
(a port scanner), N more that speak the protocol's HELLO, and prints the resident set size
before and after, plus the handler threads still referenced. Run it with PYTHONPATH pointing at
another checkout to compare.
"""
from __future__ import annotations

import gc
import socket
import sys
import threading
import time

import psutil

from ddpdoctor.peerprobe import server as L


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    srv = L.ProbeServer(port, "bench")
    gc.collect()
    before = rss_mb()
    t0 = time.monotonic()
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"GET / HTTP/1.0\n" if i % 2 else b"DDPDOCTOR/1 HELLO w\n")
        c.recv(128)
        c.close()
    while threading.active_count() > 3 and time.monotonic() - t0 < n / 100 + 30:
        time.sleep(0.1)
    gc.collect()
    after = rss_mb()
    kept = len(srv._handlers)
    srv.close()
    print(f"{n} connections in {time.monotonic() - t0:.1f} s: RSS {before:.1f} -> {after:.1f} MB "
          f"(+{after - before:.1f} MB, {1024 * (after - before) / n:.2f} KB/connection); handler threads kept: {kept}")


if __name__ == "__main__":
    main()
