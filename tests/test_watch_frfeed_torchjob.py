"""`ddpdoctor watch` beside a REAL armed torchrun + Gloo job (tests/flightrec/hang_job.py, scenario "skip"):
rank 2 stays out of all_reduce #4; the others time out; every rank dumps its flight recorder into the armed
folder and exits. watch names the hang from the recorder: rank 2, collective #4 all_reduce, and writes it
to the folder's watch-events.jsonl, where `explain --fr` finds it and agrees with the dumps."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "flightrec", "hang_job.py")
pytest.importorskip("torch")


def test_watch_names_the_gloo_hang_from_the_flight_recorder_with_its_seq(tmp_path):
    from ports import free_port
    armed = tmp_path / "armed"
    armed.mkdir()
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1", "SCENARIO": "skip", "PG_TIMEOUT": "10",
           "FR_OUT": str(armed), "TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": str(armed / "fr_rank")}
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", JOB], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        w = subprocess.run([sys.executable, "-m", "ddpdoctor", "watch", "--json", "--pid", str(job.pid), "--wait", "60",
                            "--deadline", "120"], capture_output=True, text=True, timeout=180, env=env)
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait()
    events = [json.loads(ln) for ln in w.stdout.splitlines()]
    fr = [e for e in events if e.get("source") == "flight recorder"]
    assert len(fr) == 1, (events, w.stderr)
    (e,) = fr
    assert (e["ranks"], e["seq"], e["collective"], e["waiting"]["ranks"]) == ([2], 4, "all_reduce", [0, 1, 3]), e
    assert e["where"][0]["rank"] == 2 and e["where"][0]["pid"] > 0
    assert w.returncode == 1 and events[-1]["kind"] == "summary"
    written = [json.loads(ln) for ln in (armed / "watch-events.jsonl").read_text().splitlines()]
    assert any(x.get("source") == "flight recorder" for x in written)
    x = subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", "--fr", str(armed), "--json"],
                       capture_output=True, text=True, timeout=60, env=env)
    agree = json.loads(x.stdout)["watch"]["agreement"]
    assert [(a["with"], a["verdict"]) for a in agree] == [("flight recorder", "agrees")], agree
