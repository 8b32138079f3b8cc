"""explain --fr on dumps made here by real hung torchrun + Gloo jobs (4 ranks, 3 s process-group timeout).

Both jobs run at once (each --standalone on its own port) to keep the test short on a loaded machine.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOB = os.path.join(HERE, "flightrec", "hang_job.py")


@pytest.fixture(scope="module")
def hung_jobs(tmp_path_factory):
    pytest.importorskip("torch")
    procs, outs = {}, {}
    for scenario in ("skip", "bcast"):
        out = tmp_path_factory.mktemp(f"fr-{scenario}")
        js = tmp_path_factory.mktemp(f"fr-{scenario}-json")
        env = dict(os.environ, SCENARIO=scenario, FR_OUT=str(out), FR_OUT_JSON=str(js), PG_TIMEOUT="3", TORCH_FR_BUFFER_SIZE="2000",
                   OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
        procs[scenario] = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", JOB],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        outs[scenario] = str(out)
        outs[scenario + "-json"] = str(js)
    logs = {}
    for scenario, p in procs.items():
        try:
            logs[scenario] = p.communicate(timeout=240)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # torchrun and its workers share the session we gave it
            p.communicate()
            pytest.fail(f"the {scenario} job did not finish in 240 s")
    for name, out in outs.items():
        assert len(os.listdir(out)) == 4, f"{name}: expected 4 dumps\n{logs[name.split('-')[0]][-3000:]}"
    return outs


def _explain(path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", "--fr", path, "--json"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["flight_recorder"]


def test_rank_that_skips_an_allreduce_is_named_origin(hung_jobs):
    v = _explain(hung_jobs["skip"])
    g = v["groups"][0]
    assert v["backend"] == "gloo" and v["missing"] == []
    assert (g["status"], g["seq"], g["op"], g["not_entered"], g["waiting"]) == \
        ("diverged", 4, "all_reduce", [2], [0, 1, 3])
    assert g["input_sizes"] == [[16]]


def test_rank_that_broadcasts_while_others_allreduce_is_a_mismatch(hung_jobs):
    g = _explain(hung_jobs["bcast"])["groups"][0]
    assert (g["status"], g["seq"]) == ("mismatch", 4)
    assert [(x["op"], x["input_sizes"], x["ranks"]) for x in g["variants"]] == \
        [("all_reduce", [[16]], [0, 1, 3]), ("broadcast", [[8]], [2])]


def test_text_verdict_names_the_origin(hung_jobs):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", "--fr", hung_jobs["skip"]],
                       capture_output=True, text=True, env=env, timeout=60)
    assert "ranks diverge at collective #4 all_reduce [16]" in r.stdout
    assert "never entered it (origin): rank 2 (their last collective: #3)" in r.stdout


def test_json_dumps_of_the_same_job_give_the_same_verdict(hung_jobs):
    assert _explain(hung_jobs["skip-json"])["groups"] == _explain(hung_jobs["skip"])["groups"]
