"""GPU memory by rank for a job ddpdoctor did not start (DD410): the pynvml fake at the NVML boundary
(tests/fakes/pynvml.py) reports REAL processes' pids, found in /proc by their environment, as NVML would."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchjob  # real processes: the CLI as a subprocess (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent
FAKES = ROOT / "tests" / "fakes"
PROG = "import time\nwhile True:\n    time.sleep(0.01)\n"  # a rank that is "progressing": its stack moves little, but it is not a collective


def test_a_rank_holding_memory_on_another_ranks_gpu_is_named_with_its_real_pid(tmp_path):
    tag = uuid.uuid4().hex
    port = str(20000 + os.getpid() % 20000)
    procs = []
    try:
        for r in (0, 1):
            env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "FAKE_PYNVML_TAG": tag}
            env.pop("CUDA_VISIBLE_DEVICES", None)
            env.pop("TORCHELASTIC_RUN_ID", None)
            procs.append(subprocess.Popen([sys.executable, "-c", PROG], env=env))
        state = {"tag": tag, "gpus": [
            {"uuid": "GPU-0aaa", "procs": [{"pid": {"env": {"RANK": "0", "MASTER_PORT": port}}, "used_mib": 900},
                                            {"pid": {"env": {"RANK": "1", "MASTER_PORT": port}}, "used_mib": 812}]},
            {"uuid": "GPU-1bbb", "procs": [{"pid": {"env": {"RANK": "1", "MASTER_PORT": port}}, "used_mib": 700}]}]}
        path = tmp_path / "nvml.json"
        path.write_text(json.dumps(state))
        env = {**os.environ, "FAKE_PYNVML_STATE": str(path), "FAKE_PYNVML_TAG": tag,
               "PYTHONPATH": os.pathsep.join([str(FAKES), str(ROOT)])}
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--pid", str(procs[1].pid), "--json",
                            "--interval", "0.3"], env=env, capture_output=True, text=True, timeout=60)
        assert all(x.poll() is None for x in procs), "inspect must leave the job running"
    finally:
        for x in procs:
            x.kill()
            x.wait()
    assert p.returncode == 1, p.stderr
    rep = json.loads(p.stdout)
    assert sorted(r["pid"] for r in rep["ranks"]) == sorted(x.pid for x in procs)
    (f,) = [f for r in rep["results"] if r["id"] == "DD410" for f in r["findings"]]
    assert f["message"] == f"rank 1 (pid {procs[1].pid}) holds 812 MiB on GPU 0, its own GPU is 1"
