"""Contract items of issue 21: a `--json` run stopped by SIGTERM or SIGINT still prints one JSON object on
stdout; a reader that leaves (`| head`) does not turn a verdict's exit code into 0."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hostile import ROOT

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob

ENV = {**os.environ, "PYTHONPATH": ROOT, "NO_COLOR": "1"}
BAD = "import torch\ns = torch.utils.data.DataLoader(range(3), shuffle=True, sampler=[0])\n"


def _signals_as_a_shell_leaves_them() -> None:
    # An ignored or blocked signal is inherited through exec, and Python then installs no KeyboardInterrupt
    # handler: in the full suite the SIGINT case ran to EOF and exited 0 (it passed alone). The child starts
    # as a terminal's foreground job would: SIGINT/SIGTERM at their defaults, unblocked.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _wait_reading_stdin(pid: int, deadline: float = 30.0) -> None:
    """Until the process sits in read(0, ...) (/proc/PID/syscall: number 0 on x86-64, first argument fd 0), at
    most `deadline` s: a fixed sleep lost the race with slow imports on a loaded machine."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/syscall") as f:
                if f.read().split()[:2] == ["0", "0x0"]:
                    time.sleep(0.2)
                    return
        except OSError:
            pass
        time.sleep(0.05)
    time.sleep(1.5)  # another architecture or no /proc: the old wait


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_json_run_stopped_by_a_signal_prints_json(sig, code):
    # explain --log - waits for stdin to end: a pipe that stays open keeps it running
    p = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "explain", "--log", "-", "--json"], env=ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_signals_as_a_shell_leaves_them)
    try:
        p.stdin.write("some log line\n")
        p.stdin.flush()
        _wait_reading_stdin(p.pid)  # past the imports: the command is blocked reading its stdin
        p.send_signal(sig)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    doc = json.loads(out)
    assert p.returncode == code and doc["exit_code"] == code, (p.returncode, out, err)
    assert doc["error"]["kind"] == "interrupted"
    assert "Traceback" not in err


def _through_closed_pipe(args, cwd=None):
    """Run with stdout a pipe whose reader is gone before anything is written (`| head -c0`)."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", *args], env=ENV, stdout=w, stderr=subprocess.PIPE,
                           text=True, timeout=60, cwd=cwd)
    finally:
        os.close(w)
    return p


@pytest.mark.parametrize("json_out", [False, True])
def test_lint_findings_keep_exit_1_through_a_closed_pipe(tmp_path, json_out):
    for i in range(3):
        (tmp_path / f"t{i}.py").write_text(BAD)
    p = _through_closed_pipe(["lint", *(["--json"] if json_out else []), str(tmp_path)])
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_a_refused_run_keeps_exit_1_through_a_closed_pipe(tmp_path):
    (tmp_path / "job.py").write_text("open('STARTED', 'w').write('x')\n" + BAD)
    p = _through_closed_pipe(["run", "--json", "--", "torchrun", "--standalone", "--nnodes=2", "--nproc-per-node=1",
                              "job.py"], cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert not (tmp_path / "STARTED").exists()


def test_a_clean_lint_still_exits_0_through_a_closed_pipe(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    assert _through_closed_pipe(["lint", str(tmp_path)]).returncode == 0
