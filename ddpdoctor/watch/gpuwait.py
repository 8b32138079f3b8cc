"""A rank that waits on its GPU: its Python stack stays on one line while its main thread spins in the driver.

With NCCL a collective is asynchronous: a rank whose peer never arrives returns from all_reduce at
once and blocks at its next device synchronisation (`loss.item()`, `.cpu()`, torch.cuda.synchronize()).
CUDA's default schedule there (cudaDeviceScheduleAuto: spin, or yield when there are more CUDA
contexts than cores; CUDA Runtime API, cudaSetDeviceFlags) keeps the main thread on a CPU, so the busy
time that watch/judge.py reads as progress grows, and the Python stack shows only the user's line.
Real hangs of that kind, with their native stacks (gdb): every rank in cudaDeviceSynchronize but one
in cudaMemcpyAsync under at::native::_local_scalar_dense_cuda, the `.item()` of a CUDA tensor, above
nothing but libcuda.so.1 frames (pytorch/pytorch#95944); cudaStreamSynchronize above libcuda.so.1
frames down to clock_gettime@plt, the driver's spin reading the clock (rwth-i6/returnn#1811).

What this module does, on each node, for each rank (NodeView calls it every tick):
1. candidate: the process has libcuda.so mapped, and a dump shows its main thread at a user line (not in
   a collective or a DataLoader), or that stack filled at least half of its last `py-spy record` chunk;
2. it then samples where the main thread's CPU time goes (probes/ipsample.py: perf events, the
   instruction pointer, no ptrace stop): a healthy GPU-bound loop leaves the driver every step (the
   interpreter runs the next step's Python), a rank that waits spins in libcuda.so.1 only (and the vDSO's
   clock_gettime, libc's sched_yield). One sample outside the driver ends the candidacy;
3. confirmed when the stack has been the same for GPU_WAIT_S (and twice the longest such wait this rank
   had before that ended by itself, for a job whose healthy steps sit in one sync that long), sampled
   in the driver alone for PERF_MIN_S with at least MIN_SAMPLES samples, and a dump still shows the stack: the rank's observation
   then carries `gpu` = {lib, held_s, samples, share, how[, call]}; watch/judge.py turns it into a wait.
With DDPDOCTOR_WATCH_NATIVE=1 one `py-spy dump --native` (it stops the process while it unwinds:
py-spy refuses `--native --nonblocking`) names the CUDA call at confirmation, and confirms on its own
where perf events are refused. Off by default: watch never stops a job unless asked to.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.probes import ipsample, pyspy
from ddpdoctor.probes.ipsample import DRIVER, NEUTRAL, driver_only  # noqa: F401 - (tests use them from here)

GPU_WAIT_S = 6.0       # the same Python stack, the thread in the driver, this long: it waits on its GPU
MIN_SAMPLES = 100      # driver samples before the verdict (1000 a second while it spins alone on a core)
PERF_MIN_S = 5.0       # and sampled in the driver, with nothing else, for at least this long: a healthy
                       # step's sync shorter than that is seen to end (the dumps alone cannot tell: a GPU-bound
                       # loop sits at its `.item()` line in most of them)
IDLE_S = 3.0           # no CPU sample at all this long: the thread sleeps, it does not spin
BACKOFF_S = 30.0       # after 3 candidacies that left the driver (a GPU-bound loop), the record chunks
                       # start none for this long (the dense dumps, taken while another rank is still, do)
# The CUDA calls that wait for the device (CUDA Runtime / Driver API names), and torch's ops behind them.
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaMemcpyAsync", "cudaMemcpyDtoH", "cudaStreamWaitEvent", "cuStreamSynchronize", "cuCtxSynchronize",
              "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyDtoHAsync", "cuMemcpy", "cuMemcpyAsync")
TORCH_SYNC = ("_local_scalar_dense_cuda", "copy_kernel_cuda", "copy_device_to_host", "cuda::device_synchronize",
              "stream_synchronize", "CUDAStream::synchronize", "CUDAEvent::synchronize")
_SKIP = ("torch/distributed/", "torch/utils/data/")   # a collective or a DataLoader: judged by the other rules


def stack_key(frames_outer_first) -> tuple:
    """(name, file basename, line) of each frame, outermost first: the same for a `py-spy dump` (full
    paths) and a `py-spy record` sample (short paths) of one stack."""
    return tuple((n, os.path.basename(f), ln) for n, f, ln in frames_outer_first)


def judged_elsewhere(key: tuple, files=()) -> bool:
    return any(f.startswith(_SKIP) for f in files)


def classify_native(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A main thread's `py-spy dump --native --json` frames (innermost first): the native frames inside the
    innermost Python frame. {"lib", "call"} when the innermost ones are in libcuda.so (the driver), with
    the CUDA or torch call that waits when a frame names one; None otherwise."""
    native = []
    for f in frames:
        if not f.get("module"):   # py-spy gives native frames their library as `module`, Python frames none
            if native:
                break
            continue
        native.append(f)
    if not native:
        return None
    libs = [os.path.basename(str(f.get("module") or "")) for f in native]
    if not libs[0].startswith(DRIVER) and not (libs[0].startswith(NEUTRAL) and any(x.startswith(DRIVER) for x in libs[:3])):
        return None   # the innermost frames are not the driver's (a libc read, a CPU kernel)
    call = ""
    for f in native:   # outward from the driver: the first named API or torch op that waits
        name = str(f.get("name") or "")
        if any(name == c or name.startswith(c + "_") or name.startswith(c + "(") for c in SYNC_CALLS) \
                or any(t in name for t in TORCH_SYNC):
            call = name
            break
    return {"lib": next(x for x in libs if x.startswith(DRIVER)), "call": call}


def native_dump(pid: int, timeout: float = 10.0) -> tuple[dict[str, Any] | None, float, str]:
    """One `py-spy dump --native --json` of pid (it stops the process while it unwinds): the main
    thread's classify_native, the seconds it took, and an error."""
    exe = pyspy.binary()
    if not exe:
        return None, 0.0, "py-spy is not installed"
    t0 = time.monotonic()
    try:
        p = subprocess.run([exe, "dump", "--pid", str(pid), "--native", "--json"], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0, f"py-spy --native did not answer in {timeout:g} s"
    took = time.monotonic() - t0
    try:
        threads = json.loads(p.stdout) if p.returncode == 0 else []
    except ValueError:
        threads = []
    main = next((t for t in threads if t.get("os_thread_id") == pid), None) or \
        next((t for t in threads if t.get("thread_name") == "MainThread"), None)
    if main is None:
        return None, took, (p.stderr or "no main thread").strip().splitlines()[-1][:200] if p.stderr else "no main thread"
    return classify_native(main.get("frames") or []), took, ""


@dataclass
class _Cand:
    key: tuple
    since: float                      # the stack was first seen at this time (then unchanged)
    sampler: Any = None
    perf_t: float = 0.0               # sampling started
    last_cpu_t: float = 0.0           # last drain with a sample
    driver: int = 0
    confirmed: dict | None = None


@dataclass
class _Pid:
    cuda: bool | None = None
    cuda_t: float = 0.0               # when libcuda.so was looked for (torch maps it at CUDA's first use)
    last_key: tuple | None = None
    last_t: float = 0.0
    cand: _Cand | None = None
    fails: int = 0
    rest_until: float = 0.0
    longest: float = 0.0              # longest driver wait of this rank that ended by itself
    extra: dict = field(default_factory=dict)


class GpuWatch:
    def __init__(self, native: bool | None = None):
        self.pids: dict[int, _Pid] = {}
        self.native = os.environ.get("DDPDOCTOR_WATCH_NATIVE") == "1" if native is None else native
        self.perf_error = ""          # why perf events are unavailable here, once seen
        self.native_costs: list[float] = []
        self.counts: Counter = Counter()   # candidacies started / ended by leaving the driver / confirmed

    def _p(self, pid: int) -> _Pid:
        p = self.pids.get(pid)
        if p is None:
            p = self.pids[pid] = _Pid()
        now = time.monotonic()
        if not p.cuda and now - p.cuda_t >= BACKOFF_S:
            p.cuda, p.cuda_t = ipsample.maps_has(pid, DRIVER), now
        return p

    def wants(self, now: float) -> bool:
        """Dense stack dumps wanted: a candidate's stack must be seen to stay the same."""
        return any(p.cand is not None for p in self.pids.values())

    def note_stack(self, pid: int, now: float, key: tuple | None, skip: bool) -> None:
        """A dump of the main thread (dense or slow schedule). key None: the dump failed."""
        p = self._p(pid)
        if key is None:
            return
        if p.cand is not None and key != p.cand.key:
            self._end(p, now, moved=True)
        elif p.cand is None and p.cuda and not skip:
            # any dump of a CUDA rank at a user line starts the sampler (no rest: a loop is seen to leave the
            # driver within a step, at a few ms of perf sampling); the stack counts as held from the dump
            # before when that one, 2 s earlier on the dense schedule, showed the same stack
            self._start(pid, p, key, p.last_t if key == p.last_key and now - p.last_t <= 3.0 else now, now)
        p.last_key, p.last_t = key, now

    def note_samples(self, now: float, samples: dict) -> None:
        """This tick's dumps (watch/sample.py StackSample by pid)."""
        for pid, st in samples.items():
            if not st.ok:
                continue
            kind = (st.where or {}).get("kind")
            self.note_stack(pid, now, stack_key(reversed(st.signature)),
                            kind in ("collective", "distributed", "init", "dataloader", "ddp"))

    def note_chunk(self, pid: int, now: float, samples, chunk_s: float) -> None:
        """A `py-spy record` chunk ((frames outermost first, count), ...): a stack that filled half of it."""
        p = self._p(pid)
        if not p.cuda or p.cand is not None or now < p.rest_until:
            return
        keys: Counter = Counter()
        files: dict[tuple, tuple] = {}
        for frames, n in samples:
            k = stack_key(frames)
            keys[k] += n
            files[k] = tuple(f for _, f, _ in frames)
        total = sum(keys.values())
        if total < 16:
            return
        key, n = keys.most_common(1)[0]
        if n * 2 >= total and not judged_elsewhere(key, files[key]):
            self._start(pid, p, key, now - chunk_s * n / total, now)

    def _start(self, pid: int, p: _Pid, key: tuple, since: float, now: float) -> None:
        c = _Cand(key, since)
        if not self.perf_error:
            c.sampler, err = ipsample.open_sampler(pid)
            if c.sampler is None:
                self.perf_error = err
        if c.sampler is None and not self.native:
            return   # nothing here can tell a GPU wait from a Python line that takes long
        c.perf_t = c.last_cpu_t = now
        p.cand = c
        self.counts["started"] += 1

    def _end(self, p: _Pid, now: float, moved: bool) -> None:
        c = p.cand
        if c is None:
            return
        if c.sampler is not None:
            c.sampler.close()
        if moved and (c.driver >= MIN_SAMPLES or c.confirmed):  # it sat in the driver, then went on by itself
            p.longest = max(p.longest, now - c.since)
        elif not moved:   # it ran elsewhere or slept: not a spin in the driver
            self.counts["left"] += 1
            p.fails += 1
            if p.fails >= 3:
                p.fails, p.rest_until = 0, now + BACKOFF_S
        p.cand = None

    def tick(self, now: float, live: list[int]) -> dict[int, dict[str, Any]]:
        """Drain the samplers; the `gpu` field of each rank confirmed to wait on its GPU."""
        out = {}
        for pid in list(self.pids):
            if pid not in live:
                self._end(self.pids[pid], now, moved=False)
                del self.pids[pid]
        for pid in live:
            p = self.pids.get(pid)
            if p is None or p.cand is None:
                continue
            c = p.cand
            if c.sampler is not None:
                drv, other = driver_only(c.sampler.drain())
                # before the verdict one sample elsewhere ends it (a loop's Python between its syncs);
                # after it, a real share does (the stack changing ends it too: note_stack) ...
                if other if c.confirmed is None else other * 10 > drv + other:
                    self._end(p, now, moved=False)
                    continue
                if other:
                    # ... and a few samples end that wait (the Python between two syncs at one line): the
                    # wait now is a new one, proven again from here. Counted from the sampler's start, the
                    # "for N s" of a wait named 4 s after its onset said 38 s: the healthy steps before it.
                    # It ended by itself: a later one must outlast twice it (as in _end)
                    p.longest = max(p.longest, now - c.perf_t)
                    c.since = c.perf_t = c.last_cpu_t = now
                    c.driver, c.confirmed = 0, None
                    continue
                c.driver += drv
                if drv:
                    c.last_cpu_t = now
                elif now - c.last_cpu_t >= IDLE_S:   # asleep, not spinning: the other rules judge it
                    self._end(p, now, moved=False)
                    continue
            held = now - c.since
            need = max(GPU_WAIT_S, 2 * p.longest)
            sampled = c.sampler is None or now - c.perf_t >= PERF_MIN_S
            if c.confirmed is None and held >= need and sampled and p.last_t >= now - 2.5 and p.last_key == c.key:
                c.confirmed = self._confirm(pid, c, now)
                self.counts["confirmed"] += c.confirmed is not None
                if c.confirmed is None:
                    if c.sampler is None:
                        self._end(p, now, moved=False)
                    continue
            if c.confirmed is not None:
                out[pid] = {**c.confirmed, "held_s": round(held, 1), "need_s": need,
                            **({"spin_s": round(now - c.perf_t, 1), "samples": c.driver} if c.sampler is not None else {})}
        return out

    def _confirm(self, pid: int, c: _Cand, now: float) -> dict[str, Any] | None:
        found: dict[str, Any] = {}
        if c.sampler is not None:
            if c.driver < MIN_SAMPLES:
                return None   # not enough samples yet
            found = {"lib": "libcuda.so", "samples": c.driver, "how": "perf"}
            for lib in c.sampler.maps.ranges:
                if lib[2].startswith(DRIVER):
                    found["lib"] = lib[2]
                    break
        if self.native:
            nat, took, err = native_dump(pid)
            self.native_costs.append(took)
            if nat is not None:
                found = {**(found or {"how": "py-spy --native"}), **nat}
                found["native_s"] = round(took, 2)
            elif c.sampler is None:
                return None
        return found or None

    def close(self) -> None:
        for p in self.pids.values():
            if p.cand is not None and p.cand.sampler is not None:
                p.cand.sampler.close()
                p.cand = None
