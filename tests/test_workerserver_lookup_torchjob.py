"""probes/workerserver.py looks a name up with the caller's timeout (getaddrinfo has none of its own): the
job's store and a rank's debug server named by a host name are reached through the name, and a resolver that
never answers costs the timeout, not glibc's timeout × attempts (40 s measured with a silent DNS server in
tests/test_inspect_store_lookup_lab.py, which proves it against a real one through inspect)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from ddpdoctor.probes import workerserver
from ports import free_port


@pytest.fixture
def refusing_port():
    """A loopback port nothing listens on (bound, then released)."""
    return free_port()


@pytest.fixture
def http_once():
    """A loopback listener that answers one request with a 200 and a small body, then closes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(10)

    def serve():
        try:
            c, _ = srv.accept()
        except OSError:
            return
        with c:
            c.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = c.recv(4096)
                if not chunk:
                    break
                data += chunk
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    srv.close()
    t.join(5)


def test_a_name_is_looked_up_and_its_address_reached(http_once):
    assert workerserver.http_post(f"http://localhost:{http_once}", "/handler/ping", timeout=5, cap=1024) == b"ok"


def test_a_refused_port_behind_a_name_is_a_refusal(refusing_port):
    with pytest.raises(ConnectionRefusedError):
        workerserver.store_get("localhost", refusing_port, ["k"], timeout=2)


def test_a_resolver_that_never_answers_costs_the_timeout(monkeypatch, refusing_port):
    # the resolver is the boundary faked here (a real silent one: the lab test named in the docstring)
    never = threading.Event()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: never.wait(60) and [])
    t0 = time.monotonic()
    with pytest.raises(OSError, match="cannot look up 'store-host'"):
        workerserver.store_get("store-host", refusing_port, ["k"], timeout=1.0)
    assert time.monotonic() - t0 < 5
    never.set()
