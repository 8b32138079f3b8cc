"""The live progress line: on a real pseudo-terminal it shows and is erased; off a TTY nothing is written."""
from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from ddpdoctor.render.progress import ERASE, Progress

ENV = {**os.environ, "DDPDOCTOR_PROGRESS_DELAY": "0", "TERM": "xterm"}
ENV.pop("DDPDOCTOR_NO_PROGRESS", None)


def _run_on_pty(args, timeout=120):
    """Run ddpdoctor with stderr on a pseudo-terminal; (stdout, what the terminal got, exit code)."""
    master, slave = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", *args], stdout=subprocess.PIPE, stderr=slave,
                           stdin=subprocess.DEVNULL, env=ENV, timeout=timeout)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:  # EIO: the writer side is closed and drained
                break
            if not b:
                break
            chunks.append(b)
        return p.stdout.decode(), b"".join(chunks).decode("utf-8", "replace"), p.returncode
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)


@pytest.fixture
def big_log(tmp_path):
    path = tmp_path / "big.log"
    line = b"[rank0]: step 12 loss 0.123 lr 3e-4 NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P/IPC\n"
    with open(path, "wb") as f:
        for _ in range(8):
            f.write(line * 60000)  # ~40 MB: several blocks, so progress is reported more than once
        f.write(b"socket.gaierror: [Errno -2] Name or service not known\n")
    return path


@pytest.mark.torchjob
def test_explain_shows_scanning_progress_on_a_terminal_and_erases_it(big_log):
    out, tty, code = _run_on_pty(["explain", "--log", str(big_log)])
    assert code == 0, tty
    assert "ddpdoctor: scanning" in tty and " MB of " in tty
    assert tty.rstrip("\r\n").endswith(ERASE)  # the line is gone before the report
    assert "ddpdoctor: scanning" not in out  # stdout, the report, never carries it


@pytest.mark.torchjob
def test_no_progress_off_a_terminal(big_log):
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", "--log", str(big_log)],
                       capture_output=True, text=True, env=ENV, timeout=120)
    assert p.returncode == 0 and "ddpdoctor: scanning" not in p.stderr and "\x1b" not in p.stderr


@pytest.mark.torchjob
def test_smoke_standalone_shows_its_ranks_phases_on_a_terminal():
    out, tty, code = _run_on_pty(["smoke", "--nproc", "2", "--quick", "--timeout", "30"], timeout=180)
    assert code == 0, tty + out
    assert "ddpdoctor smoke: 2 ranks" in tty


def test_progress_respects_the_delay_and_no_progress(monkeypatch):
    master, slave = pty.openpty()
    try:
        stream = os.fdopen(slave, "w", closefd=False)
        p = Progress(stream, delay=60)
        p.update("never shown")
        assert p.on and not p._shown
        monkeypatch.setenv("DDPDOCTOR_NO_PROGRESS", "1")
        assert not Progress(stream, delay=0).on
    finally:
        os.close(master)
        os.close(slave)
