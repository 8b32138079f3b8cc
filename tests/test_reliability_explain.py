"""Issue 10: a truncated or corrupt .gz log is an input error (exit 2) that still explains what was readable."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchjob  # real processes: the CLI as a subprocess (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent
DD = [sys.executable, "-m", "ddpdoctor"]
LINE = (b"[E socket.cpp:123] [c10d] The client socket has timed out after 60s while trying to connect to "
        b"(node1, 29500).\n")


def _run(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*DD, *args], capture_output=True, text=True, env=env, timeout=60)


def _log(tmp_path, cut=None, flip=None):
    data = gzip.compress(b"".join(b"step %d\n" % i + LINE for i in range(4000)))
    if flip is not None:
        data = bytearray(data)
        data[flip:flip + 40] = b"x" * 40
        data = bytes(data)
    p = tmp_path / "job.log.gz"
    p.write_bytes(data[:cut] if cut else data)
    return str(p)


def test_truncated_gz_is_exit_2_and_explains_the_readable_part(tmp_path):
    path = _log(tmp_path, cut=-200)
    cp = _run("explain", "--log", path)
    assert cp.returncode == 2, (cp.returncode, cp.stderr)
    assert "interrupted" not in cp.stderr
    assert "truncated or corrupt" in cp.stderr and "Traceback" not in cp.stderr
    assert "RDZV_ENDPOINT_UNREACHABLE" in cp.stdout  # the readable part was explained
    assert len(cp.stderr.strip().splitlines()) == 1


def test_corrupt_gz_with_json_gives_a_json_error_and_exit_2(tmp_path):
    path = _log(tmp_path, flip=600)
    cp = _run("explain", "--log", path, "--json")
    assert cp.returncode == 2, (cp.returncode, cp.stderr)
    d = json.loads(cp.stdout)
    assert d["exit_code"] == 2 and "corrupt" in d["error"]["message"]


def test_an_intact_gz_still_exits_0(tmp_path):
    cp = _run("explain", "--log", _log(tmp_path))
    assert cp.returncode == 0, cp.stderr
