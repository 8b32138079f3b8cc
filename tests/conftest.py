"""Shared pytest setup for ddpdoctor's tests.

Network lab (see tests/lab.py)
    * fixture ``lab``: a fresh 2-node :class:`lab.Lab` (node1, node2), torn down after the test;
    * fixture ``make_lab``: factory ``make_lab(nodes=("node1", "node2"), hosts="all")``
      for other shapes / several labs; every lab it made is closed after the test;
    * marker ``lab``: slow real-network tests.  Tests that use ``lab``/``make_lab``
      get it automatically, so ``pytest -m "not lab"`` runs the fast suite.

    Without root or without working ``ip netns add`` the fixtures **skip** with the
    reason; with ``DDPDOCTOR_REQUIRE_LAB=1`` in the environment they **fail**
    instead (CI sets it where the lab must run).
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lab as _labmod  # noqa: E402

LAB_FIXTURES = ("lab", "make_lab")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "lab: slow real-network test in a network-namespace lab (needs root; "
        "skipped without it unless DDPDOCTOR_REQUIRE_LAB=1)",
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(f in getattr(item, "fixturenames", ()) for f in LAB_FIXTURES):
            item.add_marker(pytest.mark.lab)


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
