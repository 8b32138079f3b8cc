"""What c10d's `The IPv6 network addresses of (host, port) cannot be retrieved (gai error: -N ...)` warning means,
on the real torch: c10d asks getaddrinfo for IPv6 with AI_V4MAPPED | AI_ALL (socket.cpp
SocketConnectOp::tryConnect), so a name with only an IPv4 address answers that lookup and logs no warning; only a
name with no address at all does, and c10d repeats it until its connect timeout. Older releases also passed
AI_ADDRCONFIG, with which glibc fails the IPv6 lookup of any name on a host without IPv6: logscan/rules.py
lookup_warning_only keeps the warning alone a weak pointer and says both."""
import io
import socket
import subprocess
import sys

import pytest

from ddpdoctor.logscan import explain_stream

_CLIENT = """
import datetime, sys, torch.distributed as d
try:
    d.TCPStore(sys.argv[1], 1, is_master=False, timeout=datetime.timedelta(seconds=1))
except Exception as e:
    print('EXC', type(e).__name__)
"""


def _client_log(host: str) -> str:
    p = subprocess.run([sys.executable, "-c", _CLIENT, host], capture_output=True, text=True, timeout=60)
    return p.stdout + p.stderr


def _ipv4_only_name() -> str | None:
    for name in (socket.gethostname(), "localhost"):
        try:
            socket.getaddrinfo(name, 80, socket.AF_INET)
        except OSError:
            continue
        try:
            socket.getaddrinfo(name, 80, socket.AF_INET6)
        except socket.gaierror:
            return name
    return None


@pytest.mark.torchjob
def test_an_ipv4_only_name_logs_no_ipv6_lookup_warning_but_a_missing_name_repeats_it():
    name = _ipv4_only_name()
    if name is None:
        pytest.skip("no name with only an IPv4 address on this machine")
    assert "cannot be retrieved" not in _client_log(name)
    missing = _client_log("no-such-host.invalid")
    warnings = [ln for ln in missing.splitlines() if "cannot be retrieved" in ln]
    assert warnings and all("The IPv6 network addresses of (no-such-host.invalid" in w for w in warnings)
    assert "gai error: -" in warnings[0]


def test_a_glibc_ipv6_lookup_warning_alone_is_a_weak_pointer_that_says_what_decides():
    # releases that asked with AI_ADDRCONFIG logged it on any host without IPv6 (glibc: EAI_NONAME): the log alone
    # does not say which release, so it stays low confidence (shown: dev counts in rules.lookup_warning_only)
    warn = ("[W1008 23:40:22.781961348 socket.cpp:767] [c10d] The IPv6 network addresses of (job-7.internal, 50745) "
            "cannot be retrieved (gai error: -2 - Name or service not known).\n")
    top = explain_stream(io.BytesIO(warn.encode())).diagnoses[0]
    assert top.failure.id == "HOSTNAME_UNRESOLVABLE" and 0.35 <= top.confidence < 0.4
    assert any("AI_V4MAPPED" in n and "getent ahosts" in n for n in top.notes)
