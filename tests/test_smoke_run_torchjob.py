"""`ddpdoctor smoke` for real: worker processes, torch, Gloo on CPU, torchrun.

Few runs, small sizes (two cores, other suites run beside this one). Faults come from the
documented test hook DDPDOCTOR_SMOKE_FAULT (ddpdoctor/smoke/worker.py). Every run carries a
unique tag in its environment; afterwards no process may still carry it.
"""
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from ddpdoctor.smoke import plan
from ddpdoctor.smoke.plan import SmokeConfig

TAG = "DDPDOCTOR_TEST_TAG"


def _tagged(tag: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/environ", "rb") as f:
                    if f"{TAG}={tag}".encode() in f.read().split(b"\0"):
                        out.append(int(p))
            except OSError:
                pass
    return out


def run(argv, env=None, timeout=120):
    """Run a command with a fresh tag; return (returncode, stdout, stderr, seconds). Asserts that
    nothing it started is still running afterwards."""
    tag = uuid.uuid4().hex
    full_env = {**os.environ, TAG: tag, **(env or {})}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DDPDOCTOR_SMOKE_FAULT"):
        if k not in (env or {}):
            full_env.pop(k, None)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=timeout)
    elapsed = time.monotonic() - t0
    deadline = time.monotonic() + 3  # a killed group is reaped by init within a moment
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _tagged(tag) == [], f"left behind: {_tagged(tag)}"
    return p.returncode, p.stdout, p.stderr, elapsed


def smoke(*args, fault=None, timeout=120):
    env = {"DDPDOCTOR_SMOKE_FAULT": fault} if fault else None
    rc, out, err, elapsed = run([sys.executable, "-m", "ddpdoctor", "smoke", "--json", *args], env, timeout)
    try:
        report = json.loads(out)
    except ValueError:
        pytest.fail(f"stdout is not one JSON document (rc={rc}):\n{out[-2000:]}\nstderr:\n{err[-3000:]}")
    return rc, report, err, elapsed


def results(report):
    return {r["id"]: r for r in report["results"]}


def test_two_local_ranks_pass_with_exact_results_and_nccl_tests_bandwidth():
    rc, report, err, _ = smoke("--nproc", "2", "--max-size", "1M")
    assert rc == 0, err
    res = results(report)
    assert res["DD501"]["status"] == "pass" and res["DD502"]["status"] == "pass"
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    expected_steps = len(plan.correctness_steps(SmokeConfig(max_size=1 << 20), "gloo", 2))
    for rec in report["ranks"]:
        assert rec["backend"] == "gloo" and rec["device"] == "cpu" and rec["error"] is None
        assert len(rec["correctness"]) == expected_steps and all(e["ok"] for e in rec["correctness"])
        assert [e["size"] for e in rec["bandwidth"]] == [64 << 10, 1 << 20]
    for row in report["bandwidth"]:
        assert row["algbw_gbps"] > 0
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * (2 - 1) / 2)
    assert "text" not in report  # the tables are render/smoke.py's, drawn from these fields


def test_four_local_ranks_quick():
    rc, report, err, _ = smoke("--nproc", "4", "--quick")
    assert rc == 0, err
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1, 2, 3]
    assert all(e["ok"] for r in report["ranks"] for e in r["correctness"])
    assert results(report)["DD503"]["status"] == "skip"  # --quick: correctness only


def _dd501(report):
    return [f["message"] for f in results(report)["DD501"]["findings"]]


def test_a_sigstopped_rank_is_named_with_host_and_phase_within_the_timeout():
    rc, report, err, elapsed = smoke("--nproc", "2", "--quick", "--timeout", "3",
                                     fault="stop:rank=1:phase=all_reduce int64")
    assert rc == 1, err
    pid = next(s["pid"] for s in report["verdict"]["states"] if s["rank"] == 1)
    msgs = _dd501(report)
    assert msgs[0] == (f"rank 1 (pid {pid}, {report['host']}) is stopped (SIGSTOP/SIGTSTP) in phase "
                       f"'all_reduce int64 4 KiB': no heartbeat for "
                       f"{next(s['heartbeat_age_s'] for s in report['verdict']['states'] if s['rank'] == 1)} s")
    # the watchdog fires once the first rank has waited --timeout in the phase (rank 0 may have
    # entered it a moment before rank 1 stopped), and names rank 1 within a few seconds of its stop
    waited = max(s["in_phase_s"] for s in report["verdict"]["states"])
    stalled_for = next(s["in_phase_s"] for s in report["verdict"]["states"] if s["rank"] == 1)
    assert waited >= 3 and stalled_for <= 3 + 3, "named within --timeout plus a few seconds of the stall"
    assert elapsed < 60


def test_a_killed_rank_is_named_at_once():
    rc, report, err, _ = smoke("--nproc", "2", "--quick", "--timeout", "20", fault="kill:rank=1:phase=broadcast")
    assert rc == 1, err
    (st,) = [s for s in report["verdict"]["states"] if s["rank"] == 1]
    assert _dd501(report)[0].startswith(f"rank 1 (pid {st['pid']}, {report['host']}) killed by SIGKILL in phase "
                                        "'broadcast float32 4 KiB from rank 0'")
    assert report["verdict"]["after_s"] < 10, "a death needs no --timeout to be certain"


def test_a_stopped_rank_0_is_named_by_the_launcher():
    rc, report, err, _ = smoke("--nproc", "2", "--quick", "--timeout", "2", fault="stop:rank=0:phase=barrier")
    assert rc == 1, err
    assert report["verdict"]["detected_by"].startswith("ddpdoctor's launcher")
    assert "rank 0 " in _dd501(report)[0] and "is stopped (SIGSTOP/SIGTSTP) in phase 'barrier'" in _dd501(report)[0]


def test_a_rank_that_sends_the_wrong_data_is_recognised():
    rc, report, err, _ = smoke("--nproc", "3", "--quick", fault="zero:rank=1:phase=all_reduce float32")
    assert rc == 1, err
    (f,) = results(report)["DD502"]["findings"]
    assert f["message"].startswith("all_reduce float32 4 KiB: element 0 is 4.0, expected 6 on ranks 0-2")
    assert "rank 1's contribution (2) were missing" in f["message"]


def test_under_torchrun_only_rank_0_prints_the_report():
    rc, out, err, _ = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "--no-python", "ddpdoctor", "smoke", "--quick", "--json"])
    assert rc == 0, err[-3000:]
    report = json.loads(out)  # one document: rank 1 said nothing
    assert report["launcher"] == "torchrun" and len(report["ranks"]) == 2
    assert results(report)["DD502"]["status"] == "pass"


def test_nproc_under_a_launcher_is_a_usage_error():
    rc, out, err, _ = run([sys.executable, "-m", "ddpdoctor", "smoke", "--nproc", "2"],
                          env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "29500"})
    assert rc == 2 and err.count("\n") == 1 and "leave --nproc out" in err


def test_bad_max_size_is_a_usage_error():
    rc, out, err, _ = run([sys.executable, "-m", "ddpdoctor", "smoke", "--max-size", "lots"])
    assert rc == 2 and err.startswith("ddpdoctor: error: --max-size")


def test_two_srun_tasks_map_slurm_variables_and_rank_0_hosts_the_store():
    """What srun gives each task (no torchrun agent: rank 0's worker hosts the store)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tag = uuid.uuid4().hex
    procs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "LOCAL_"))}
        env.update({TAG: tag, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NTASKS": "2",
                    "SLURM_STEP_ID": "0", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_JOB_ID": "77",
                    "SLURM_STEP_NODELIST": "localhost", "MASTER_PORT": str(port)})
        procs.append(subprocess.Popen([sys.executable, "-m", "ddpdoctor", "smoke", "--quick", "--json"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    assert outs[1][0] == "", "only rank 0 prints"
    report = json.loads(outs[0][0])
    assert report["launcher"] == "slurm" and [r["local_rank"] for r in report["ranks"]] == [0, 1]
    assert _tagged(tag) == []
