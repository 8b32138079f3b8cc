"""Shared pytest setup for ddpdoctor's tests.

Four kinds of test, one marker each, assigned here (README "Tests", docs/lab.md):

    unit      in this process: no other process, no socket (facts -> findings, parsers, renderers).
              `pytest -m unit` is the fast suite.
    torchjob  real processes on this machine: torch jobs (smoke, inspect's jobs), the CLI as a
              subprocess, loopback listeners and resolvers. Files named `test_*_torchjob.py`, or a
              test marked `@pytest.mark.torchjob`.
    gpu       a real NVIDIA GPU (NVML, NCCL, CUDA memory): files named `test_*_gpu.py`; they skip
              with the reason where there is none (CI has none; run on a lent GPU machine).
    lab       network namespaces, iptables, a real Slurm: files named `test_*_lab.py`, and every
              test that uses the ``lab``/``make_lab`` fixtures (tests/lab.py, tests/slurmlab.py).

A test is a unit test unless its file name, a fixture or a marker says otherwise; a unit test
that starts a process or opens a socket fails with the line that says which marker it needs.
`bash scripts/test.sh` runs all three.

Network lab (see tests/lab.py)
    * fixture ``lab``: a fresh 2-node :class:`lab.Lab` (node1, node2), torn down after the test;
    * fixture ``make_lab``: factory ``make_lab(nodes=("node1", "node2"), hosts="all")``
      for other shapes / several labs; every lab it made is closed after the test;
    * marker ``lab``: slow real-network tests.  Tests that use ``lab``/``make_lab``
      get it automatically.

    Without root or without working ``ip netns add`` the fixtures **skip** with the
    reason; with ``DDPDOCTOR_REQUIRE_LAB=1`` in the environment they **fail**
    instead (CI sets it where the lab must run).
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lab as _labmod  # noqa: E402

LAB_FIXTURES = ("lab", "make_lab")


KINDS = ("unit", "torchjob", "lab", "gpu")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "lab: slow real-network test in a network-namespace lab (needs root; "
        "skipped without it unless DDPDOCTOR_REQUIRE_LAB=1)",
    )
    config.addinivalue_line("markers", "torchjob: real processes on this machine (torch jobs, the CLI, loopback servers)")
    config.addinivalue_line("markers", "unit: in this process, no other process and no socket (the fast suite)")
    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU (files named test_*_gpu.py); skipped, with the reason, without one")


def kind_of(item) -> str:
    """lab, torchjob or unit: by the test's fixtures, its file name, then its own marker."""
    by_name = _kind_by_file_name(os.path.basename(str(item.fspath)))
    if by_name == "gpu" or item.get_closest_marker("gpu"):
        return "gpu"
    if by_name == "lab" or any(f in getattr(item, "fixturenames", ()) for f in LAB_FIXTURES) or item.get_closest_marker("lab"):
        return "lab"
    if by_name == "torchjob" or item.get_closest_marker("torchjob"):
        return "torchjob"
    return "unit"


def _kind_by_file_name(name: str) -> str | None:
    return ("lab" if name.endswith("_lab.py") else "torchjob" if name.endswith("_torchjob.py")
            else "gpu" if name.endswith("_gpu.py") else None)


def pytest_ignore_collect(collection_path, config):
    """With `-m` naming only the kinds, a file whose name fixes its kind and that the expression leaves out
    is not imported at all: `-m unit` then never imports the lab's and the torch jobs' modules (some
    import torch at the top, seconds of collection for tests that would all be deselected)."""
    kind = _kind_by_file_name(collection_path.name)
    expr = config.getoption("markexpr", "") or ""
    if kind is None or not expr or set(re.findall(r"[A-Za-z_]\w*", expr)) - set(KINDS) - {"and", "or", "not"}:
        return None
    try:
        from _pytest.mark.expression import Expression
        keep = Expression.compile(expr).evaluate(lambda marker, **kw: marker == kind)
    except Exception:  # noqa: BLE001 - another pytest: collect as usual, deselection still applies
        return None
    return None if keep else True


def pytest_collection_modifyitems(config, items):
    for item in items:
        kind = kind_of(item)
        if not item.get_closest_marker(kind):
            item.add_marker(getattr(pytest.mark, kind))


class _OutsideUnit:
    """Records what a unit test started that a unit test must not: a process, a socket."""

    def __init__(self):
        self.seen: list[str] = []

    def popen_init(self, real):
        def init(proc, args, *a, **kw):
            self.seen.append(f"process {args if isinstance(args, str) else ' '.join(map(str, args))[:120]}")
            return real(proc, args, *a, **kw)
        return init

    def sock_call(self, what, real):
        def call(sock, address, *a, **kw):
            self.seen.append(f"socket {what} {address!r}"[:140])
            return real(sock, address, *a, **kw)
        return call


@pytest.fixture(autouse=True)
def _unit_stays_in_process(request, monkeypatch):
    """A unit test that starts a process or opens a socket is not one: it fails and says so (the
    code under test still runs as it would, only the test's kind is wrong)."""
    if kind_of(request.node) != "unit":
        yield
        return
    watch = _OutsideUnit()
    monkeypatch.setattr(subprocess.Popen, "__init__", watch.popen_init(subprocess.Popen.__init__))
    for what in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, what, watch.sock_call(what, getattr(socket.socket, what)))
    yield
    monkeypatch.undo()
    if watch.seen:
        pytest.fail(f"a unit test used {watch.seen[0]} ({len(watch.seen)} in all): mark it "
                    "@pytest.mark.torchjob, or move it to a test_*_torchjob.py file (tests/conftest.py)", pytrace=False)


def lab_unavailable(reason: str):
    """Skip (or, with DDPDOCTOR_REQUIRE_LAB=1, fail) because no lab can be built."""
    if os.environ.get("DDPDOCTOR_REQUIRE_LAB") == "1":
        pytest.fail(f"DDPDOCTOR_REQUIRE_LAB=1 but the network lab is unavailable: {reason}", pytrace=False)
    pytest.skip(f"network lab unavailable: {reason}")


@pytest.fixture
def make_lab():
    made: list[_labmod.Lab] = []

    def factory(nodes=("node1", "node2"), **kw) -> _labmod.Lab:
        ok, why = _labmod.lab_available()
        if not ok:
            lab_unavailable(why)
        try:
            lab = _labmod.Lab(nodes, **kw)
        except _labmod.LabUnavailable as e:
            lab_unavailable(str(e))
        made.append(lab)
        return lab

    try:
        yield factory
    finally:
        errors = []
        for lab in reversed(made):
            try:
                lab.close()
            except Exception as e:  # keep closing the others
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def lab(make_lab):
    return make_lab()
