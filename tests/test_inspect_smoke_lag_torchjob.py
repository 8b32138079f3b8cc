"""`smoke`: a rank that never finishes starting is named by how far it lags the others, not after a 60 s floor.

Real run: `ddpdoctor smoke --nproc 2` where rank 1 is stopped (SIGSTOP, by a sitecustomize put on its
PYTHONPATH) while it imports torch, or sleeps before it even starts. Before: named after 60+ s even with
--timeout 5. Now: --timeout after rank 0 is ready, plus the watchdog's poll.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "tests" / "inspect_jobs" / "stall_site"


def _leftovers(tag: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if f"STALL_TAG={tag}".encode() in open(f"/proc/{d}/environ", "rb").read().split(b"\0"):
                    if open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                        out.append(int(d))
            except OSError:
                pass
    return out


@pytest.mark.parametrize("how", ["stop", "sleep"])
def test_a_rank_that_never_starts_is_named_within_timeout_plus_seconds(how):
    tag = uuid.uuid4().hex
    env = {**os.environ, "STALL_RANK": "1", "STALL_HOW": how, "STALL_TAG": tag,
           "PYTHONPATH": os.pathsep.join([str(SITE), str(ROOT)])}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "smoke", "--nproc", "2", "--timeout", "5", "--quick",
                        "--json"], env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    try:
        assert p.returncode == 1, p.stderr[-2000:]
        rep = json.loads(p.stdout)
        (dd501,) = [r for r in rep["results"] if r["id"] == "DD501"]
        assert dd501["findings"][0]["message"].startswith("rank 1 "), dd501
        # 5 s after rank 0 is ready (import torch: a few s on a loaded 2-core machine) + the poll; the old
        # floor alone was 60 s
        assert took < 40, f"took {took:.1f} s"
    finally:
        end = time.monotonic() + 10
        while _leftovers(tag) and time.monotonic() < end:
            time.sleep(0.2)
        left = _leftovers(tag)
        for pid in left:
            os.kill(pid, 9)
        assert not left, f"left running: {left}"
