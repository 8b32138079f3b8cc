"""`ddpdoctor watch` beside a REAL torchrun + Gloo job whose rank 0 waits for its "GPU" every step.

No GPU here: rank 0 calls cuStreamSynchronize of tests/gpu_jobs/fake_libcuda.c built as libcuda.so.1,
which spins in that library as the real driver does while a device sync waits (the boundary this
machine cannot provide). Everything watch reads is real: /proc, py-spy's stacks, the kernel's perf
samples of the spinning thread, py-spy --native's unwinding. The real-GPU version of these tests is
in tests/test_device_gpu.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from watchlab import ROOT, Watch, fake_libcuda, killed_after, tree

pytest.importorskip("torch")
pytestmark = pytest.mark.lab
JOB = ROOT / "tests" / "gpu_jobs" / "fake_cuda_job.py"
HANG_GOAL_S = 15.0
LINE_SYNC = next(i + 1 for i, s in enumerate(JOB.read_text().splitlines()) if s.rstrip().endswith("# LINE_SYNC"))


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory) -> Path:
    return fake_libcuda(tmp_path_factory)


class Job:
    def __init__(self, tmp: Path, lib: Path, wait_s: float, seconds: float):
        self.log, self.fault_file = tmp / "job.log", tmp / "fault"
        env = {**os.environ, "FAKE_LIBCUDA": str(lib), "FAKE_WAIT_S": str(wait_s), "FAULT_FILE": str(self.fault_file),
               "TRAIN_SECONDS": str(seconds), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      "--nproc-per-node=2", str(JOB)], env=env, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.seen: set[int] = set()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, word: str, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.seen |= tree(self.proc.pid)
            hit = [ln for ln in self.text().splitlines() if ln.startswith(word)]
            if hit:
                return hit[-1]
            assert self.proc.poll() is None, self.text()[-3000:]
            time.sleep(0.2)
        raise AssertionError(f"no {word!r} in {timeout} s:\n{self.text()[-3000:]}")

    def kill(self) -> None:
        pids = self.seen | tree(self.proc.pid)
        for pid in pids:
            try:
                os.kill(pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait(15)


@pytest.fixture
def job(tmp_path, libcuda):
    with killed_after(lambda **kw: Job(tmp_path, libcuda, **kw)) as start:
        yield start


def test_a_rank_spinning_in_the_cuda_driver_at_one_line_is_named_the_origin_the_job_left_running(job):
    j = job(wait_s=0.3, seconds=240)
    j.wait_for("step 10", 120)
    w = Watch("--pid", str(j.proc.pid))
    try:
        time.sleep(40)  # healthy: rank 0 sits in the driver ~90 % of each step, and leaves it every step
        assert [e for e in w.events if e["kind"] != "straggler"] == [], w.events
        j.fault_file.write_text("hang")
        onset = float(j.wait_for("hang_at", 30).split()[1])
        e = w.wait_for("hang", HANG_GOAL_S + 10, after=onset)
        assert e is not None, (w.events, w.stderr)
        print(f"GPU wait named {e['at'] - onset:.1f} s after the onset (load {os.getloadavg()[0]:.1f})")
        assert e["at"] - onset <= HANG_GOAL_S, e["at"] - onset
        assert e["ranks"] == [0] and e["detail"].startswith("waits on its GPU"), e
        (x,) = e["where"]
        assert (x["where"]["file"], x["where"]["line"]) == ("fake_cuda_job.py", LINE_SYNC)
        assert e["waiting"]["ranks"] == [1] and e["waiting"]["call"] == "all_reduce"
        (g,) = e["gpu_wait"]
        assert g["rank"] == 0 and g["lib"] == "libcuda.so.1" and g["how"] == "perf"
        assert j.proc.poll() is None and all(os.path.exists(f"/proc/{p}") for p in j.seen)  # only looked
    finally:
        w.stop()


def test_a_loop_whose_every_step_sits_two_seconds_in_the_driver_is_no_hang(job):
    j = job(wait_s=2.0, seconds=240)
    j.wait_for("ready 0", 120)
    w = Watch("--pid", str(j.proc.pid), "--deadline", "50")
    w.finish(90)
    # rank 1 waits for rank 0 every step: a straggler may be named (rank 0 is the one the other waits for)
    assert [e for e in w.events if e["kind"] in ("hang", "recovered")] == [], w.events
    assert w.events[-1]["kind"] == "summary" and w.events[-1]["end"] == "deadline", (w.events, w.stderr[-2000:])
