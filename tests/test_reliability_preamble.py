"""Issue 10: a --preamble child that starts its own session does not outlive the smoke run."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchjob  # real processes: the CLI as a subprocess (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent


def _pids_with(marker: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


def test_a_preamble_child_in_its_own_session_is_killed_after_the_run(tmp_path):
    marker = f"ddpdoctor-escapee-{uuid.uuid4().hex[:8]}"
    pre = tmp_path / "preamble.py"
    # one child escapes the rank's session with setsid; one clears its environment too (env -i)
    pre.write_text(
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}-a'], start_new_session=True,\n"
        "                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}-b'], start_new_session=True,\n"
        "                 env={}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "MASTER_", "RANK", "WORLD_SIZE",
                                                                   "LOCAL_", "TORCHELASTIC", "PET_", "OMPI_", "PMI_"))}
    env["PYTHONPATH"] = str(ROOT)
    try:
        cp = subprocess.run([sys.executable, "-m", "ddpdoctor", "smoke", "--nproc", "1", "--quick", "--backend", "gloo",
                             "--preamble", str(pre), "--timeout", "60"], capture_output=True, text=True, env=env,
                            timeout=180)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        deadline = time.monotonic() + 5
        while _pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _pids_with(marker)
        assert left == [], f"preamble children outlived the run: {left}"
    finally:
        for pid in _pids_with(marker):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
