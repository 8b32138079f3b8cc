"""The paths only a real NVIDIA GPU exercises: NVML as nvidia-ml-py really answers, a live NCCL rank
under torchrun for `inspect` and `watch` (py-spy on a process with CUDA and NCCL threads), `smoke`
on NCCL, and a flight-recorder trace written by the installed torch's NCCL process group.

These skip, with the reason, on a machine without a GPU (CI has none); run them where one is lent:
    python -m pytest -q -m gpu tests/test_device_gpu.py
One GPU is enough: two NCCL ranks cannot share one GPU, so every NCCL job here has one rank (the GPU-wait
job has a second rank on the CPU, in a Gloo group).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "gpu_jobs" / "train_step.py"


def _gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


pytestmark = pytest.mark.skipif(_gpu_count() == 0, reason="no NVIDIA GPU here (nvidia-smi -L lists none)")


def ddp(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


class Job:
    """torchrun --standalone --nproc-per-node=1 tests/gpu_jobs/train_step.py, in a session of its own."""

    def __init__(self, tmp: Path, env: dict | None = None):
        self.log = tmp / "job.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      "--nproc-per-node=1", str(JOB)], stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def steps(self) -> int:
        return sum(1 for line in self.log.read_text(errors="replace").splitlines() if line.startswith("step "))

    def wait_steps(self, n: int, deadline: float = 180) -> None:
        end = time.monotonic() + deadline
        while self.steps() < n:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < end, f"no step {n} in {deadline} s:\n" + self.log.read_text()[-3000:]
            time.sleep(0.5)

    def worker(self) -> int:
        import psutil
        kids = [c for c in psutil.Process(self.proc.pid).children(recursive=True)
                if "train_step.py" in " ".join(c.cmdline())]
        assert len(kids) == 1, kids
        return kids[0].pid

    def close(self) -> None:
        import psutil
        try:  # torchrun starts its worker in a session of its own: find it before the agent goes
            tree = [self.proc.pid] + [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            tree = [self.proc.pid]
        for pid in tree:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        self.proc.wait(timeout=30)
        assert not [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.fixture
def job(tmp_path):
    jobs = []

    def start(**env):
        j = Job(tmp_path, {k: str(v) for k, v in env.items()})
        jobs.append(j)
        return j
    yield start
    for j in jobs:
        j.close()


def test_nvml_snapshot_agrees_with_nvidia_smi():
    from ddpdoctor.probes import nvml
    snap = nvml.snapshot()
    assert snap.available, snap.error
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    assert len(snap.gpus) == len(smi) == _gpu_count()
    for gpu, line in zip(snap.gpus, smi):
        index, uuid, total_mib = (f.strip() for f in line.split(","))
        assert (gpu.index, gpu.uuid) == (int(index), uuid)
        assert abs(gpu.total / 2**20 - int(total_mib)) <= 1  # nvidia-smi prints MiB, NVML bytes
        assert 0 <= gpu.used <= gpu.total


def test_inspect_finds_the_live_nccl_rank_maps_its_gpu_memory_and_leaves_it_running(job):
    from ddpdoctor.probes import nvml
    j = job(GPU_JOB_GIB=2)
    j.wait_steps(5)
    pid = j.worker()
    held = {p.pid: p.used for g in nvml.snapshot().gpus for p in g.processes}
    r = ddp("inspect", "--pid", str(j.proc.pid), "--json", timeout=120)
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    (rank,) = report["ranks"]
    assert (rank["rank"], rank["pid"]) == (0, pid)
    dd410 = next(x for x in report["results"] if x["id"] == "DD410")
    if pid in held:  # NVML sees this pid namespace: memory mapped to the rank, on its own GPU
        assert held[pid] is None or held[pid] >= 2 * 2**30
        assert dd410["status"] == "pass", dd410
    else:  # a container whose NVML reports host pids: said, not guessed
        assert [f["id"] for f in dd410["findings"]] == ["DD410.pid-namespace"], dd410
    before = j.steps()
    j.wait_steps(before + 5, deadline=60)  # inspect only looked: the job goes on
    import psutil
    assert psutil.Process(pid).status() != psutil.STATUS_STOPPED


def test_smoke_runs_on_nccl_with_one_gpu():
    r = ddp("smoke", "--nproc", "1", "--backend", "nccl", "--max-size", "16M", "--json", timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert "nccl" in json.dumps(report).lower()


def test_a_flight_recorder_trace_from_this_torch_and_nccl_is_read(job, tmp_path):
    dumps = tmp_path / "fr"
    dumps.mkdir()
    j = job(GPU_JOB_GIB=0.1, TORCH_NCCL_TRACE_BUFFER_SIZE=2000, GPU_JOB_DUMP=dumps / "rank_0", GPU_JOB_DUMP_AT=20)
    end = time.monotonic() + 180
    while not (dumps / "rank_0").exists():
        assert time.monotonic() < end and j.proc.poll() is None, j.log.read_text()[-3000:]
        time.sleep(0.5)
    r = ddp("explain", "--fr", str(dumps), "--json")
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    fr = json.loads(r.stdout)["flight_recorder"]
    assert fr["ranks"] == [0] and fr["backend"] == "nccl"
    (group,) = [g for g in fr["groups"] if g["pg_desc"] == "default_pg"]
    assert group["op"] == "all_reduce" and group["seq"] >= 19, group


def test_watch_names_a_stopped_nccl_rank(job):
    j = job(GPU_JOB_GIB=0.1)
    j.wait_steps(5)
    pid = j.worker()
    w = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "watch", "--pid", str(j.proc.pid), "--json",
                          "--deadline", "90"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(15)  # watch learns the healthy pace first
        stopped_at = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        events = []
        for line in w.stdout:
            events.append(json.loads(line))
            if events[-1].get("kind") == "hang":
                break
        took = time.monotonic() - stopped_at
    finally:
        os.kill(pid, signal.SIGCONT)
        w.kill()
        w.wait(timeout=30)
    hang = events[-1]
    assert hang.get("kind") == "hang", events
    assert 0 in (hang.get("ranks") or [hang.get("rank")]), hang
    assert "stop" in json.dumps(hang).lower(), hang
    assert took <= 20, took


def test_watch_reads_a_healthy_nccl_flight_recorder_dump_without_calling_it_a_hang(job, tmp_path):
    dumps = tmp_path / "armed"
    dumps.mkdir()
    j = job(GPU_JOB_GIB=0.1, TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_FR_DUMP_TEMP_FILE=dumps / "rank_",
            GPU_JOB_DUMP=dumps / "rank_0", GPU_JOB_DUMP_AT=60)
    j.wait_steps(5)
    w = subprocess.run([sys.executable, "-m", "ddpdoctor", "watch", "--pid", str(j.proc.pid), "--json",
                        "--deadline", "25", "--events", str(tmp_path / "events.jsonl")],
                       capture_output=True, text=True, timeout=90)
    assert (dumps / "rank_0").exists(), j.log.read_text()[-2000:]  # dumped while watch looked
    events = [json.loads(x) for x in w.stdout.splitlines() if x.strip()]
    assert events and events[-1]["kind"] == "summary", (w.stdout[-2000:], w.stderr[-2000:])
    assert [e for e in events if e["kind"] == "hang"] == [], events  # every collective in it completed
    assert w.returncode == 0, w.stderr[-2000:]


GPU_WAIT_JOB = ROOT / "tests" / "gpu_jobs" / "gpu_wait_job.py"
LINE_ITEM = next(i + 1 for i, s in enumerate(GPU_WAIT_JOB.read_text().splitlines()) if s.rstrip().endswith("# LINE_ITEM"))


def test_watch_names_a_rank_waiting_on_its_gpu_within_15s_after_a_healthy_minute(tmp_path):
    """Rank 0's `.item()` spins in the driver ~90 % of every step for 60 s: no event. Then its kernel never
    ends: watch names rank 0 as waiting on its GPU within 15 s, rank 1 waiting in the all_reduce, and the
    job runs on. Then one `py-spy --native` of rank 0 (the job is hung: a stop costs nothing) must show the
    driver under the CUDA call, the names watch/gpuwait.py looks for; with DDPDOCTOR_GPU_ARTIFACTS set, that
    JSON is kept there as a fixture (tests/gpu_jobs/native/)."""
    import psutil

    from ddpdoctor.probes import ipsample, pyspy
    from ddpdoctor.watch.gpuwait import classify_native
    fault, log = tmp_path / "fault", tmp_path / "job.log"
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                            str(GPU_WAIT_JOB)], stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                           env={**os.environ, "PYTHONUNBUFFERED": "1", "FAULT_FILE": str(fault), "GPU_JOB_STEP_MS": "200"})
    w = None
    try:
        end = time.monotonic() + 120
        while log.read_text(errors="replace").count("step ") < 2:
            assert job.poll() is None and time.monotonic() < end, log.read_text()[-3000:]
            time.sleep(0.5)
        kids = [c for c in psutil.Process(job.pid).children(recursive=True) if "gpu_wait_job.py" in " ".join(c.cmdline())
                and "torch.distributed.run" not in " ".join(c.cmdline())]
        rank0 = next(c.pid for c in kids if "RANK=0" in open(f"/proc/{c.pid}/environ", "rb").read().decode(
            errors="replace").split("\0"))
        sampler, why = ipsample.open_sampler(rank0)
        env = {}
        if sampler is None:   # perf events refused here: the opt-in native confirmation instead
            env["DDPDOCTOR_WATCH_NATIVE"] = "1"
        else:
            sampler.close()
        w = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "watch", "--pid", str(job.pid), "--json",
                              "--deadline", "110"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, **env})
        events: list = []
        import threading
        threading.Thread(target=lambda: [events.append((time.monotonic(), json.loads(ln))) for ln in w.stdout],
                         daemon=True).start()
        time.sleep(60)
        assert [e for _, e in events if e["kind"] in ("hang", "recovered")] == [], events
        fault.write_text("hang")
        end = time.monotonic() + 30
        while "hang_at" not in log.read_text(errors="replace"):
            assert time.monotonic() < end, log.read_text()[-3000:]
            time.sleep(0.2)
        onset = float([x for x in log.read_text().splitlines() if x.startswith("hang_at")][-1].split()[1])
        end = time.monotonic() + 30
        while not [e for _, e in events if e["kind"] == "hang"] and time.monotonic() < end:
            time.sleep(0.2)
        hangs = [(t, e) for t, e in events if e["kind"] == "hang"]
        assert hangs, (events, why)
        t, e = hangs[0]
        print(f"GPU wait named {t - onset:.1f} s after the onset; perf: {why or 'yes'}; event: {json.dumps(e)}")
        assert t - onset <= 15, (t - onset, e)
        assert e["ranks"] == [0] and e["detail"].startswith("waits on its GPU"), e
        assert e["where"][0]["where"]["line"] == LINE_ITEM, e
        assert e["waiting"]["ranks"] == [1] and e["waiting"]["call"] == "all_reduce", e
        assert e["gpu_wait"][0]["lib"].startswith("libcuda.so"), e
        assert job.poll() is None and psutil.Process(rank0).status() != psutil.STATUS_STOPPED  # left running
        r = subprocess.run([pyspy.binary(), "dump", "--pid", str(rank0), "--native", "--json"], capture_output=True,
                           text=True, timeout=120)
        keep = os.environ.get("DDPDOCTOR_GPU_ARTIFACTS")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / "pyspy_native_item_hang.json").write_text(r.stdout)
            (Path(keep) / "pyspy_native_item_hang.txt").write_text(subprocess.run(
                [pyspy.binary(), "dump", "--pid", str(rank0), "--native"], capture_output=True, text=True, timeout=120).stdout)
        main = next(x for x in json.loads(r.stdout) if x["os_thread_id"] == rank0)
        got = classify_native(main["frames"])
        print("native:", got, [f["name"] for f in main["frames"]][:25])
        assert got is not None and got["lib"].startswith("libcuda.so"), main["frames"][:20]
    finally:
        if w is not None:
            w.kill()
            w.wait(timeout=30)
        tree = [job.pid] + [c.pid for c in psutil.Process(job.pid).children(recursive=True)] if job.poll() is None else []
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.wait(timeout=30)


def test_debug_server_sequence_numbers_move_on_nccl_stall_behind_a_gpu_kernel_and_survive_sigstop(job, tmp_path):
    """watch/seqfeed.py on a live NCCL rank (torch's debug server started by the job): the NCCL handler's
    pg_status answers; the completed number moves while healthy; with an all_reduce queued behind a GPU kernel
    that spins, the enqueued number is ahead of the completed one and the completed one stops, while the main
    thread waits in torch.cuda.synchronize (spinning, by CUDA's default: the case /proc cannot tell from work); under SIGSTOP the server
    stops too: the poll is an error within its timeout, never a hang."""
    from ports import free_port

    from ddpdoctor.probes import workerserver
    from ddpdoctor.watch import ranks, seqfeed
    stall = tmp_path / "stall"
    j = job(GPU_JOB_GIB=0.1, GPU_JOB_DEBUG_SERVER=free_port(), TORCH_NCCL_TRACE_BUFFER_SIZE=2000,
            GPU_JOB_STALL=stall)
    j.wait_steps(5)
    pid = j.worker()
    time.sleep(3)
    assert workerserver.has_debug_server(pid), "no pt_workerserver thread in the rank"
    _, found, _ = ranks.find(j.proc.pid)
    feed = seqfeed.SeqFeed(found)

    def poll(dense=False):
        for r in feed._by_rank.values():
            r.next = 0.0
        if dense:
            feed.dense(time.monotonic())
        t0 = time.monotonic()
        feed.tick(time.monotonic())
        return feed.latest(0), time.monotonic() - t0

    a, _ = poll()
    assert a and "pgs" in a, (a, feed.error)
    assert a["source"] == seqfeed.NCCL_EP, a
    time.sleep(3)
    b, _ = poll()
    assert b["pgs"]["0"]["done"] > a["pgs"]["0"]["done"], (a, b)
    assert b["pgs"]["0"]["enq"] >= b["pgs"]["0"]["done"], b
    stall.write_text("1")
    time.sleep(5)
    c, _ = poll(dense=True)
    time.sleep(4)
    d, _ = poll(dense=True)
    assert d["pgs"]["0"]["done"] == c["pgs"]["0"]["done"], (c, d)  # nothing completes
    assert d["pgs"]["0"]["enq"] == d["pgs"]["0"]["done"] + 1, d    # the all_reduce behind the kernel
    assert d["pgs"]["0"]["op"] == "all_reduce", d                  # named from the active entries
    os.kill(pid, signal.SIGSTOP)
    try:
        e, took = poll()
        assert "error" in e and took <= seqfeed.TIMEOUT_S + 2, (e, took)
    finally:
        os.kill(pid, signal.SIGCONT)
