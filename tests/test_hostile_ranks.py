"""A rank started through a wrapper (`torchrun --no-python bash -c "python train.py"`) is the Python
process, not the shell (issue 21: the shell was taken for the rank and called "gone"). A real torchrun
+ Gloo job, as tests/test_inspect_torchjob.py runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from test_inspect_torchjob import JOB, ROOT, _tree, _workers, job  # noqa: F401

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob

pytest.importorskip("torch")


def test_a_rank_behind_bash_c_is_found_and_not_gone(tmp_path):
    log = tmp_path / "job.log"
    env = {**os.environ, "HANG_MODE": "other", "HANG_RANK": "1", "HANG_STEPS": "3", "OMP_NUM_THREADS": "1"}
    # `; true`: bash stays the parent (without it bash may exec python in place)
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                             "--no-python", "bash", "-c", f"{sys.executable} {JOB}; true"], env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    pids: set[int] = set()
    try:
        end = time.monotonic() + 90
        while log.read_text().count("ready ") < 2:
            assert time.monotonic() < end and proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.3)
        time.sleep(0.5)
        pids = _tree(proc.pid)
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--json", "--pid", str(proc.pid)],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        rep = json.loads(p.stdout)
        msgs = [f["message"] for r in rep["results"] for f in r["findings"]]
        assert not [m for m in msgs if "gone" in m], msgs
        assert sorted(r["rank"] for r in rep["ranks"]) == [0, 1]
        assert all("python" in r["cmdline"].split(" ", 1)[0] for r in rep["ranks"]), rep["ranks"]
        assert any("rank 1 in broadcast" in m for m in msgs), msgs
    finally:
        import signal
        for pid in pids | _tree(proc.pid):
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.kill()
        proc.wait(10)
