"""GPU memory attribution (DD401-DD404) with a fake at the pynvml boundary (tests/fakes/pynvml.py).

No GPU here: the fake mimics nvidia-ml-py's API, the probe (ddpdoctor/probes/nvml.py) reads it
as it reads the real library, and one real 2-rank run shows a rank's real pid attributed.
"""
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from ddpdoctor.checks import gpu as G
from ddpdoctor.facts.smoke import RankRecord
from ddpdoctor.facts.gpu import visible_gpu
from ddpdoctor.model import Severity
from ddpdoctor.probes import nvml as probe
from ddpdoctor.smoke.plan import SmokeConfig

FAKES = Path(__file__).resolve().parent / "fakes"
sys.path.insert(0, str(FAKES))


def _load_fake():
    """The fake (tests/fakes/pynvml.py) by its path: a test collected earlier may already have put
    the real nvidia-ml-py under the name `pynvml` in sys.modules, and `import pynvml` would return it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("pynvml", FAKES / "pynvml.py")
    mod = importlib.util.module_from_spec(spec)
    saved = sys.modules.get("pynvml")
    sys.modules["pynvml"] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        if saved is not None:
            sys.modules["pynvml"] = saved
        else:
            sys.modules.pop("pynvml", None)
    return mod


fake = _load_fake()
from test_smoke_run_torchjob import TAG, _tagged  # noqa: E402

MiB = 1 << 20
U0, U1 = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"


@pytest.fixture
def fake_nvml(monkeypatch):
    assert fake.__file__.startswith(str(FAKES))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(probe, "_state", {})

    def configure(state):
        fake.configure(state)
        probe._state.clear()
    yield configure
    fake.configure(None)


def test_the_fake_behaves_like_pynvml_where_ddpdoctor_uses_it(fake_nvml):
    fake_nvml({"gpus": [{"uuid": U0, "procs": [{"pid": 4121, "used_mib": 512}]}]})
    with pytest.raises(fake.NVMLError) as e:
        fake.nvmlDeviceGetCount()  # before nvmlInit
    assert isinstance(e.value, fake.NVMLError_Uninitialized) and e.value.value == fake.NVML_ERROR_UNINITIALIZED
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    (p,) = fake.nvmlDeviceGetComputeRunningProcesses(h)
    assert (p.pid, p.usedGpuMemory) == (4121, 512 * MiB)
    assert fake.nvmlDeviceGetMemoryInfo(h).used == 512 * MiB
    with pytest.raises(fake.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(1)
    fake.nvmlShutdown()


def test_probe_reads_every_gpu_with_its_processes(fake_nvml):
    me = os.getpid()
    fake_nvml({"driver": "550.54.15", "gpus": [
        {"uuid": U0, "name": "NVIDIA H100 80GB HBM3", "total_mib": 81559, "procs": [{"pid": me, "used_mib": 600}]},
        {"uuid": U1, "procs": [{"pid": 4242, "used_mib": None}]}]})
    snap = probe.snapshot()
    assert snap.available and snap.driver == "550.54.15"
    g0, g1 = snap.gpus
    assert (g0.index, g0.uuid, g0.total, g0.used) == (0, U0, 81559 * MiB, 600 * MiB)
    assert g0.processes[0].pid == me and g0.processes[0].used == 600 * MiB
    assert g0.processes[0].name == psutil.Process(me).name()
    assert g1.processes[0].used is None  # NVML cannot tell (WDDM, MIG): kept as unknown, not 0


def test_probe_without_a_driver_says_why(fake_nvml):
    fake_nvml({"init_error": "LIBRARY_NOT_FOUND"})
    snap = probe.snapshot()
    assert not snap.available and "NVML Shared Library Not Found" in snap.error


@pytest.mark.parametrize("cvd,local,expect", [
    (None, 1, 1), ("1,0", 0, 1), ("GPU-bbbb", 0, 1), ("0", 1, None), ("", 0, None), ("7", 0, None)])
def test_visible_gpu_follows_cuda_visible_devices(cvd, local, expect):
    gpus = [{"index": 0, "uuid": U0}, {"index": 1, "uuid": U1}]
    assert visible_gpu(local, cvd, gpus)["index"] == expect


# ---------------------------------------------------------------- judgement on plain records

def _gpu(index, uuid, procs):
    return {"index": index, "uuid": uuid, "name": "H100", "total": 80 << 30, "used": sum(p[1] for p in procs),
            "processes": [{"pid": pid, "used": used, "name": name} for pid, used, name in procs]}


def _rec(rank, pid, host, own, snaps):
    return {"rank": rank, "pid": pid, "host": host, "local_rank": rank % 2, "local_world_size": 2,
            "gpu": {"nvml": {"available": True, "error": "", "driver": "550"},
                    "expected": {"index": own, "uuid": [U0, U1][own], "how": f"local rank {rank % 2}"},
                    "snapshots": snaps}}


def _typed(records):
    return {r: RankRecord.from_dict(v) for r, v in records.items()}


def _ctx(records, fix_records=None, cfg=SmokeConfig(), backend="nccl"):
    class Ctx:
        pass
    c = Ctx()
    c.records, c.fix_records = _typed(records), _typed(fix_records or {})
    c.cfg, c.backend = cfg, backend
    return c


def _two_ranks_rank1_also_on_gpu0():
    after = [_gpu(0, U0, [(4100, 900 * MiB, "python"), (4121, 512 * MiB, "python")]),
             _gpu(1, U1, [(4121, 700 * MiB, "python"), (777, 300 * MiB, "jupyter")])]
    before = [_gpu(0, U0, []), _gpu(1, U1, [(777, 300 * MiB, "jupyter")])]
    snaps = {"before init": before, "after init": after, "after first collective": after}
    return {0: _rec(0, 4100, "node2", 0, snaps), 1: _rec(1, 4121, "node2", 1, snaps)}


def test_rank_pid_on_another_ranks_gpu_is_named_with_pid_host_and_mib():
    (f,) = G.rank_memory_on_own_gpu(_ctx(_two_ranks_rank1_also_on_gpu0()))
    assert f.severity is Severity.ERROR
    assert f.message == "rank 1 (pid 4121, node2) holds 512 MiB on GPU 0 (its own GPU is 1)"
    assert "set_device" in f.fix.code and "map_location" in f.fix.code
    assert f.evidence["first_stage"] == "after init" and f.evidence["stage"] == "after first collective"
    assert f.hint.startswith("first seen after init: init_process_group ran before torch.cuda.set_device")


def test_process_outside_the_job_is_reported_once_per_gpu():
    (f,) = G.no_foreign_gpu_processes(_ctx(_two_ranks_rank1_also_on_gpu0()))
    assert f.severity is Severity.WARNING
    assert f.message == "GPU 1 on node2 holds 300 MiB in pid 777 (jupyter), which is not part of this job"


def test_two_ranks_on_one_gpu_and_a_rank_without_a_gpu():
    recs = _two_ranks_rank1_also_on_gpu0()
    recs[1]["gpu"]["expected"] = dict(recs[0]["gpu"]["expected"], how="CUDA_VISIBLE_DEVICES=0 entry 0")
    recs[2] = _rec(2, 4130, "node2", 0, recs[0]["gpu"]["snapshots"])
    recs[2]["gpu"]["expected"] = {"index": None, "uuid": None, "how": "CUDA_VISIBLE_DEVICES='0,1' has no entry 2"}
    msgs = [f.message for f in G.each_rank_has_own_gpu(_ctx(recs))]
    assert "rank 2 (pid 4130, node2) has no GPU of its own: CUDA_VISIBLE_DEVICES='0,1' has no entry 2" in msgs
    assert "ranks 0, 1 on node2 all select GPU 0" in msgs


def test_fix_round_reports_before_and_after_per_gpu():
    before = _two_ranks_rank1_also_on_gpu0()
    fixed_snap = [_gpu(0, U0, [(5100, 600 * MiB, "python")]), _gpu(1, U1, [(5121, 600 * MiB, "python")])]
    snaps = {"before init": fixed_snap, "after init": fixed_snap, "after first collective": fixed_snap}
    after = {0: _rec(0, 5100, "node2", 0, snaps), 1: _rec(1, 5121, "node2", 1, snaps)}
    findings = list(G.fix_removes_extra_memory(_ctx(before, after, cfg=SmokeConfig(fix=True))))
    assert [f.severity for f in findings] == [Severity.INFO, Severity.INFO]
    assert findings[0].message == "node2 GPU 0: 1412 MiB in 2 process(es) -> 600 MiB in 1"
    assert findings[1].message == "node2 GPU 1: 700 MiB in 1 process(es) -> 600 MiB in 1"


def test_fix_that_does_not_move_the_memory_fails():
    before = _two_ranks_rank1_also_on_gpu0()
    findings = list(G.fix_removes_extra_memory(_ctx(before, before, cfg=SmokeConfig(fix=True))))
    assert findings[-1].severity is Severity.ERROR and "rank 1 on GPU 0" in findings[-1].message


# ---------------------------------------------------------------- a real run, fake NVML

@pytest.mark.torchjob
def test_real_ranks_pids_are_attributed_from_nvml(tmp_path):
    tag = uuid.uuid4().hex
    foreign = subprocess.Popen(["sleep", "60"])
    try:
        state = {"driver": "550.54.15", "tag": tag, "gpus": [
            {"uuid": U0, "procs": [{"pid": {"env": {"RANK": "0", "DDPDOCTOR_SMOKE_WORKER": "1"}}, "used_mib": 900},
                                   {"pid": {"env": {"RANK": "1", "DDPDOCTOR_SMOKE_WORKER": "1"}}, "used_mib": 512}]},
            {"uuid": U1, "procs": [{"pid": {"env": {"RANK": "1", "DDPDOCTOR_SMOKE_WORKER": "1"}}, "used_mib": 700},
                                   {"pid": foreign.pid, "used_mib": 300}]}]}
        path = tmp_path / "nvml.json"
        path.write_text(json.dumps(state))
        env = {**os.environ, "FAKE_PYNVML_STATE": str(path), "FAKE_PYNVML_TAG": tag, TAG: tag,
               "PYTHONPATH": os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")])}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", "smoke", "--nproc", "2", "--quick", "--json",
                            "--select", "DD4"], env=env, capture_output=True, text=True, timeout=120)
    finally:
        foreign.kill()
        foreign.wait()
    assert p.returncode == 1, p.stderr
    report = json.loads(p.stdout)
    pids = {r["rank"]: r["pid"] for r in report["ranks"]}
    by_id = {r["id"]: r for r in report["results"]}
    (f401,) = by_id["DD401"]["findings"]
    assert f401["message"] == f"rank 1 (pid {pids[1]}, {report['host']}) holds 512 MiB on GPU 0 (its own GPU is 1)"
    (f402,) = by_id["DD402"]["findings"]
    assert f"pid {foreign.pid} (sleep)" in f402["message"] and "300 MiB" in f402["message"]
    assert by_id["DD403"]["status"] == "pass"
    assert _tagged(tag) == []


@pytest.mark.torchjob
def test_fix_reruns_with_the_fix_and_reports_before_and_after(tmp_path):
    """The --fix plumbing end to end: round 1 finds rank 1 on GPU 0, a second round of fresh
    processes runs with fix_round set, and DD404 compares. The fake puts rank 1 on GPU 0 only in
    processes that are not the fix round, as set_device before the first CUDA call would."""
    tag = uuid.uuid4().hex
    not_fixed = {"DDPDOCTOR_SMOKE_CONFIG": '"fix_round": false'}
    rank = lambda r, **kw: {"env": {"RANK": str(r), "DDPDOCTOR_SMOKE_WORKER": "1"}, **kw}  # noqa: E731
    state = {"tag": tag, "gpus": [
        {"uuid": U0, "procs": [{"pid": rank(0), "used_mib": 600},
                               {"pid": rank(1, env_contains=not_fixed), "used_mib": 512}]},
        {"uuid": U1, "procs": [{"pid": rank(1), "used_mib": 600}]}]}
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(state))
    env = {**os.environ, "FAKE_PYNVML_STATE": str(path), "FAKE_PYNVML_TAG": tag, TAG: tag,
           "PYTHONPATH": os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "smoke", "--nproc", "2", "--quick", "--fix", "--json",
                        "--select", "DD4"], env=env, capture_output=True, text=True, timeout=180)
    report = json.loads(p.stdout)
    by_id = {r["id"]: r for r in report["results"]}
    assert by_id["DD401"]["status"] == "fail", "the problem is still in the set-up until the fix is applied"
    assert p.returncode == 1
    assert by_id["DD404"]["status"] == "pass", by_id["DD404"]
    msgs = [f["message"] for f in by_id["DD404"]["findings"]]
    assert msgs == [f"{report['host']} GPU 0: 1112 MiB in 2 process(es) -> 600 MiB in 1",
                    f"{report['host']} GPU 1: 600 MiB in 1 process(es) -> 600 MiB in 1"]
    fixed_pids = {r["pid"] for r in report["fix"]["ranks"]}
    assert fixed_pids and not fixed_pids & {r["pid"] for r in report["ranks"]}, "fresh processes for the re-run"
    assert _tagged(tag) == []
