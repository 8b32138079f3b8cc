"""watch/gpuwait.py and probes/ipsample.py on real processes: a Python process that calls cuStreamSynchronize
of the stand-in libcuda.so.1 (tests/gpu_jobs/fake_libcuda.c: it spins in that library as the driver does
while a device sync waits) through ctypes, for ever, or 0.2 s a call between a few ms of Python.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor.probes import ipsample
from ddpdoctor.watch import gpuwait
from ddpdoctor.watch.gpuwait import GpuWatch, driver_only
from watchlab import fake_libcuda


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory) -> Path:
    return fake_libcuda(tmp_path_factory)


SPIN = """
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1]); lib.fake_set_wait.argtypes = [ctypes.c_double]
wait = float(sys.argv[2])
print("up", flush=True)
def step():
    lib.fake_set_wait(wait)
    lib.cuStreamSynchronize(None)
while True:
    step()
    sum(i * i for i in range(30000))  # the step's own Python
"""


@pytest.fixture
def spinner(libcuda):
    procs = []

    def start(wait: float) -> int:
        p = subprocess.Popen([sys.executable, "-c", SPIN, str(libcuda), str(wait)], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "up"
        return p.pid
    yield start
    for p in procs:
        p.kill()
        p.wait(10)


def perf_or_skip(pid: int) -> ipsample.Sampler:
    s, why = ipsample.open_sampler(pid)
    if s is None:
        pytest.skip(why)
    return s


def test_the_kernel_samples_a_spinning_thread_in_libcuda_without_stopping_it(spinner):
    pid = spinner(-1.0)
    s = perf_or_skip(pid)
    try:
        time.sleep(1.5)
        libs = s.drain()
    finally:
        s.close()
    drv, other = driver_only(libs)
    assert drv >= 50 and other == 0, libs
    assert open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] in "RS"  # never stopped


def watch_for(pid: int, seconds: float, **kw) -> tuple[list[dict], GpuWatch]:
    """The node side as NodeView drives it: a real `py-spy dump` every 2 s, the sampler drained every second."""
    from ddpdoctor.watch.sample import stacks
    gw = GpuWatch(**kw)
    got = []
    t0 = time.monotonic()
    next_dump = 0.0
    while time.monotonic() - t0 < seconds:
        now = time.monotonic()
        if now >= next_dump:
            gw.note_samples(now, stacks([pid], 10.0))
            next_dump = now + 2.0
        out = gw.tick(now, [pid])
        if pid in out:
            got.append(out[pid])
        time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
    gw.close()
    return got, gw


def test_an_endless_driver_wait_at_one_line_is_confirmed_after_the_window(spinner):
    pid = spinner(-1.0)
    perf_or_skip(pid).close()
    got, gw = watch_for(pid, gpuwait.GPU_WAIT_S + 10)
    assert got, "never confirmed"
    assert got[-1]["lib"] == "libcuda.so.1" and got[-1]["how"] == "perf"
    assert got[0]["held_s"] >= gpuwait.GPU_WAIT_S and got[-1]["samples"] >= gpuwait.MIN_SAMPLES


def test_a_loop_that_waits_in_the_driver_most_of_each_step_is_never_confirmed(spinner):
    pid = spinner(0.2)   # ~95 % of the time in the driver, the same Python line in most dumps
    perf_or_skip(pid).close()
    got, gw = watch_for(pid, 20)
    assert got == []
    assert gw.counts["started"] >= 2 and gw.counts["left"] >= 2, gw.counts   # looked at, and seen to leave


def test_with_native_stacks_asked_for_the_cuda_call_is_named_and_the_pause_measured(spinner):
    pid = spinner(-1.0)
    perf_or_skip(pid).close()
    got, gw = watch_for(pid, gpuwait.GPU_WAIT_S + 14, native=True)
    assert got and got[-1]["call"] == "cuStreamSynchronize" and got[-1]["lib"] == "libcuda.so.1", got[-1:]
    assert len(gw.native_costs) == 1 and got[-1]["native_s"] > 0   # one stop of the process, measured


def test_a_wait_is_counted_from_the_threads_last_sample_outside_the_driver(spinner):
    """A loop of 8 s syncs with a few ms of Python between them: once a sync is confirmed, the next one is
    a new wait. Its spin counter and "for N s" count from the last sample outside the driver, not from when
    the sampler started (a wait named 4.1 s after its onset said "for 38 s": the seconds and samples of the
    healthy steps before the onset were counted in)."""
    pid = spinner(8.0)
    perf_or_skip(pid).close()
    got, gw = watch_for(pid, 30)
    assert got, "never confirmed"
    # each report's proof lies within one sync (8 s, +1 s of drain and tick granularity)
    assert max(g["spin_s"] for g in got) <= 9.5, [(g["spin_s"], g["samples"]) for g in got]
    assert max(g["samples"] for g in got) <= 9.5 * 1000, [g["samples"] for g in got]  # 1 sample a ms of CPU
