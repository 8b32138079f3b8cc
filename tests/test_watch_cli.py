"""`ddpdoctor watch`'s command line: bad usage is one line and exit 2, never a traceback; events files."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def watch(*args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "watch", *args], capture_output=True, text=True,
                          timeout=60, env={**e, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.torchjob  # starts `ddpdoctor watch` processes (tests/conftest.py kinds)
@pytest.mark.parametrize("args, says", [
    (("--pid", "0"), "--pid 0: want a positive process id"),
    (("--gather", "--pid", "5"), "--pid names a process of one node"),
    (("--gather",), "--gather runs once per node under srun"),
    (("--deadline", "nan"), "is not a finite number"),
    (("--events", "/nonexistent-dir/x.jsonl"), "its directory is not writable"),
])
def test_bad_usage_is_one_line_and_exit_2(args, says):
    p = watch(*args)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and says in p.stderr, p.stderr


@pytest.mark.torchjob
def test_a_pid_that_is_no_job_is_one_line_and_exit_2():
    p = watch("--pid", str(os.getpid()))
    assert p.returncode == 2 and "not a process of a running torch.distributed job" in p.stderr, p.stderr


def test_events_written_by_a_watch_are_read_back_and_bad_lines_skipped(tmp_path):
    from ddpdoctor.logscan.watchevents import load
    from ddpdoctor.render.watch import to_json
    f = tmp_path / "watch-events.jsonl"
    e = {"kind": "hang", "ranks": [1], "hosts": ["n1"], "where": [], "detail": "stopped", "t": 1.0, "wall": 0.0,
         "_t": 1.0}
    f.write_text(to_json(e) + "\n{not json\n" + '"a string"\n')
    (back,) = load(str(f)).events  # explain's reader (tests/test_explain_watch_events.py)
    assert back["kind"] == "hang" and back["time"] == "1970-01-01T00:00:00+00:00" and "_t" not in back
