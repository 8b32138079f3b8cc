"""The torch side of `ddpdoctor smoke`: one rank. Run only as a child process of a supervisor
(ddpdoctor/smoke/supervise.py), in its own session, with RANK/WORLD_SIZE/... and the configuration
in its environment: `python -m ddpdoctor.smoke.worker`.

Three threads:
  main     the phases: store, backend, init, collectives, bandwidth, report;
  beat     a heartbeat to the supervisor's pipe every 0.25 s (the supervisor's proof of life);
  monitor  the same heartbeat into the rendezvous store; rank 0's monitor also reads every rank's
           heartbeat and, when the run stalls, reports and tells every rank to stop (key `abort`).
Collectives release the interpreter lock while they wait, so beat and monitor keep running while
the main thread hangs in one (verified with Gloo: a peer's SIGSTOP blocks the all_reduce, the
monitor still beats).

Test hook (documented in docs/smoke.md, used by tests/test_smoke_faults.py):
DDPDOCTOR_SMOKE_FAULT="stop:rank=1:phase=all_reduce" makes rank 1 SIGSTOP itself on entering the
first phase whose name starts with "all_reduce". Actions: stop, kill (SIGKILL), exit (code 7),
hang (sleep in the main thread), raise, zero (contribute zeros to that all_reduce). Several
faults: separate them with ';'.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from ddpdoctor.smoke import plan as P
from ddpdoctor.smoke.channel import Channel
from ddpdoctor.smoke.progress import Tracker, heartbeat, process_state

FAULT_VAR = "DDPDOCTOR_SMOKE_FAULT"
BENCH_VAR = "DDPDOCTOR_SMOKE_BENCH_REFERENCE"  # benchmarks/bench_smoke.py: also time a plain loop
BEAT_S = 0.25


def parse_faults(spec: str | None) -> list[dict[str, Any]]:
    out = []
    for part in (spec or "").split(";"):
        if not part.strip():
            continue
        action, *kv = part.strip().split(":")
        f = {"action": action, "rank": None, "phase": "", "fired": False}
        for item in kv:
            k, _, v = item.partition("=")
            f[k] = int(v) if k == "rank" else v
        out.append(f)
    return out


def _category(phase: str) -> str:
    """Phase times are shown per category: correctness and bandwidth have many phases."""
    if phase.startswith("bandwidth"):
        return "bandwidth"
    if phase.startswith(("all_reduce", "broadcast", "barrier")):
        return "correctness"
    if phase.startswith("gloo"):
        return "gloo"
    return phase


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:400]}"


class Worker:
    def __init__(self) -> None:
        env = os.environ
        self.t0 = time.monotonic()
        self.cfg = P.SmokeConfig.from_json(env["DDPDOCTOR_SMOKE_CONFIG"])
        self.chan = Channel.from_env()
        self.rank, self.world = int(env["RANK"]), int(env["WORLD_SIZE"])
        self.local_rank = int(env.get("LOCAL_RANK", "0"))
        self.local_world = int(env.get("LOCAL_WORLD_SIZE", "1"))
        self.master, self.port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
        self.agent_store = env.get("DDPDOCTOR_SMOKE_AGENT_STORE") == "1"
        self.prefix = env.get("DDPDOCTOR_SMOKE_PREFIX", "ddpdoctor")
        self.host, self.pid, self.ppid = socket.gethostname(), os.getpid(), os.getppid()
        self.faults = parse_faults(env.get(FAULT_VAR))
        self.backend = ""
        self.plan = P.phases(self.cfg, "gloo", self.world)  # up to "init" the same for every backend
        self.index, self.phase, self.phase_t = 0, P.START, self.t0
        self.beat, self.err = 0, None
        self.in_collective = False  # inside a torch.distributed call, i.e. waiting for the other ranks
        self.kick = threading.Event()  # a new phase: the beat thread tells the supervisor at once
        self.kick_store = threading.Event()  # ... and the monitor tells the store
        self.published = -1  # phase index the store last saw
        self.finish_lock = threading.Lock()
        self.finished = False
        self.zero_phase = ""
        self.store = self.mon = None
        self.times: dict[str, float] = {}
        self.record: dict[str, Any] = {
            "rank": self.rank, "host": self.host, "pid": self.pid, "local_rank": self.local_rank,
            "local_world_size": self.local_world, "launcher": env.get("DDPDOCTOR_SMOKE_LAUNCHER", ""),
            "device": "cpu", "device_uuid": None, "has_gpu": False, "backend": "", "versions": {"python": platform.python_version()},
            "settings": {}, "phases": self.times, "correctness": [], "bandwidth": [], "gloo_cpu": None,
            "gpu": None, "error": None,
        }

    # ------------------------------------------------------------------ progress
    def hb(self) -> dict[str, Any]:
        return heartbeat(self.rank, self.index, self.phase, self.beat, self.host, self.pid, self.local_rank,
                         time.monotonic() - self.phase_t, self.err, self.in_collective)

    @contextlib.contextmanager
    def waiting(self):
        """Inside: this rank waits for the others (a collective, the store), not for itself."""
        self.in_collective = True
        try:
            yield
        finally:
            self.in_collective = False

    def enter(self, name: str) -> None:
        now = time.monotonic()
        cat = _category(self.phase)
        self.times[cat] = round(self.times.get(cat, 0.0) + now - self.phase_t, 4)
        j = next((k for k in range(self.index + 1, len(self.plan)) if self.plan[k] == name), None)
        if j is None:  # a phase outside the plan is a bug in the plan, not in the user's cluster
            raise RuntimeError(f"ddpdoctor bug: phase {name!r} is not in the plan after {self.phase!r}")
        self.index, self.phase, self.phase_t = j, name, now
        self.kick.set()
        self.kick_store.set()
        for f in self.faults:
            if not f["fired"] and f["rank"] in (None, self.rank) and name.startswith(f["phase"]):
                f["fired"] = True
                self._fire(f)

    def _fire(self, f: dict[str, Any]) -> None:
        deadline = time.monotonic() + 1.0  # let the store see this phase first, so the report can name it
        while self.mon is not None and self.published < self.index and time.monotonic() < deadline:
            time.sleep(0.01)
        action = f["action"]
        if action == "stop":
            os.kill(self.pid, signal.SIGSTOP)
        elif action == "kill":
            os.kill(self.pid, signal.SIGKILL)
        elif action == "exit":
            os._exit(7)
        elif action == "hang":
            while True:
                time.sleep(3600)
        elif action == "raise":
            raise RuntimeError(f"injected fault in phase {self.phase!r}")
        elif action == "zero":
            self.zero_phase = self.phase

    def _beat_loop(self) -> None:
        while True:
            if os.getppid() != self.ppid:
                os._exit(1)  # the supervisor is gone: nobody would ever reap or report us
            self.beat += 1
            self.chan.send({"t": "hb", **self.hb()})
            self.kick.wait(BEAT_S)
            self.kick.clear()

    # ------------------------------------------------------------------ store monitor
    def _monitor_loop(self) -> None:
        mon = self.mon
        tracker = Tracker(self.world, self.cfg, time.monotonic()) if self.rank == 0 else None
        known: set[int] = set()
        last_pub = last_poll = 0.0
        last_index = -1
        failing_since = None
        poll_s = max(BEAT_S, self.world / 400)  # rank 0 reads every heartbeat: keep the store's load bounded
        while True:
            now = time.monotonic()
            try:
                if self.index != last_index or now - last_pub >= 0.9 * BEAT_S:
                    idx = self.index
                    mon.set(f"hb/{self.rank}", json.dumps(self.hb()))
                    self.published, last_index, last_pub = idx, idx, now
                if now - last_poll >= 0.9 * poll_s:
                    last_poll = now
                    if tracker is None:
                        if mon.check(["abort"]):
                            self._aborted(json.loads(mon.get("abort")))
                    else:
                        self._poll_world(mon, tracker, known, now)
                        self.chan.send({"t": "progress", "states": tracker.states(time.monotonic())})
                failing_since = None
            except Exception as e:  # noqa: BLE001 - the store host froze or died
                failing_since = failing_since or now
                if now - failing_since > self.cfg.timeout:
                    self.chan.send({"t": "lost_store", "error": _short(e), "for_s": round(now - failing_since, 1)})
                    os._exit(1)
            # sleep until the next beat or phase change: a thread that woke more often would
            # compete with the collectives for two cores and the interpreter lock (bandwidth)
            self.kick_store.wait(BEAT_S)
            self.kick_store.clear()

    def _poll_world(self, mon, tracker: Tracker, known: set[int], now: float) -> None:
        tracker.update(self.hb(), now)
        for r in range(1, self.world):
            if r not in known and mon.check([f"hb/{r}"]):
                known.add(r)
        if known:
            keys = [f"hb/{r}" for r in sorted(known)]
            values = mon.multi_get(keys) if hasattr(mon, "multi_get") else [mon.get(k) for k in keys]
            for v in values:
                tracker.update(json.loads(v), now)
        for st in tracker.ranks.values():
            # a silent rank on this host whose process is gone died: no need to wait out its limit
            if st.host == self.host and not st.exit and now - st.last_beat_at > 1.0 and st.phase != P.DONE:
                if process_state(st.pid) in ("gone", "zombie"):
                    tracker.mark_exit(st.rank, "exited (its process is gone)", now)
        verdict = tracker.verdict(time.monotonic(), "rank 0's watchdog")
        if verdict:
            for st in verdict["states"]:
                if st.get("seen") and st.get("host") == self.host and st["rank"] != self.rank:
                    st["proc_state"] = process_state(st.get("pid"))
            self._finish_with_verdict(verdict)

    def _aborted(self, verdict: dict) -> None:
        self.chan.send({"t": "aborted", "kind": verdict.get("kind"), "late": verdict.get("late")})
        try:
            self.mon.add("abort_ack", 1)
        finally:
            os._exit(1)

    def _finish_with_verdict(self, verdict: dict) -> None:
        """Rank 0's watchdog fired: report what every rank was doing, stop every rank, exit 1."""
        with self.finish_lock:
            if self.finished:
                return
            self.finished = True
        records = {str(self.rank): self._record_copy()}
        try:
            for r in range(1, self.world):
                if self.mon.check([f"rec/{r}"]):
                    records[str(r)] = json.loads(self.mon.get(f"rec/{r}"))
        except Exception:  # noqa: BLE001 - report what we have
            pass
        self.chan.send({"t": "world", "world": self._world(records, verdict)})
        alive = [s for s in verdict["states"] if s.get("seen") and s["rank"] != self.rank and not s.get("exit")
                 and s.get("heartbeat_age_s", 99) < 2.0]
        try:
            self.mon.set("abort", json.dumps({"kind": verdict["kind"], "late": verdict["late"]}))
            deadline = time.monotonic() + 1.0  # let the others read it before the store goes away with us
            while time.monotonic() < deadline and int(self.mon.add("abort_ack", 0)) < len(alive):
                time.sleep(0.05)
        except Exception:  # noqa: BLE001
            pass
        os._exit(1)

    def _record_copy(self) -> dict[str, Any]:
        for _ in range(5):  # the main thread may be appending to it
            try:
                return json.loads(json.dumps(self.record, default=str))
            except RuntimeError:
                time.sleep(0.01)
        return {"rank": self.rank, "host": self.host, "pid": self.pid}

    def _world(self, records: dict[str, Any], verdict: dict | None) -> dict[str, Any]:
        return {"round": 2 if self.cfg.fix_round else 1, "backend": self.backend, "world_size": self.world,
                "master": f"{self.master}:{self.port}", "records": records, "verdict": verdict,
                "duration_s": round(time.monotonic() - self.t0, 3)}

    # ------------------------------------------------------------------ phases
    def run(self) -> int:
        threading.Thread(target=self._beat_loop, name="beat", daemon=True).start()
        self.enter(P.IMPORT)
        try:
            import torch
            import torch.distributed as dist
        except ImportError as e:  # not installed for this Python, or a broken build: say so, not "exited in 'start'"
            self.record["error"] = {"phase": P.IMPORT, "message": f"torch cannot be imported: {_short(e)}",
                                    "hint": f"install it for {sys.executable}: {P.TORCH_INSTALL}"}
            self.chan.send({"t": "record", "record": self.record})
            return 1
        self.torch, self.dist = torch, dist
        self.record["versions"]["torch"] = torch.__version__
        self.enter(P.STORE)
        try:
            self._connect_store()
        except Exception as e:  # noqa: BLE001 - no store: nothing to tell the others, tell the supervisor
            self.record["error"] = {"phase": P.STORE, "message": _short(e), "hint": self._store_hint(e)}
            self.chan.send({"t": "record", "record": self.record})
            return 1
        threading.Thread(target=self._monitor_loop, name="monitor", daemon=True).start()
        try:
            self._collectives()
        except Exception as e:  # noqa: BLE001 - a failed phase is a finding: report it, then wait for rank 0
            self.err = f"{self.phase}: {_short(e)}"
            self.record["error"] = {"phase": self.phase, "message": _short(e), "hint": self._hint(e)}
            if os.environ.get("DDPDOCTOR_DEBUG"):
                traceback.print_exc()
        return self._report()

    def _connect_store(self) -> None:
        from torch.distributed import PrefixStore, TCPStore
        is_master = self.rank == 0 and not self.agent_store
        store = TCPStore(self.master, self.port, None, is_master,
                         datetime.timedelta(seconds=self.cfg.startup_timeout), wait_for_workers=False)
        store.set_timeout(datetime.timedelta(seconds=self.cfg.timeout))
        mon = store.clone()
        mon.set_timeout(datetime.timedelta(seconds=min(5.0, self.cfg.timeout)))
        self.store, self.mon = PrefixStore(self.prefix, store), PrefixStore(self.prefix, mon)

    def _store_hint(self, e: BaseException) -> str:
        text = str(e).lower()
        if self.rank == 0 and not self.agent_store and ("address already in use" in text or "bind" in text):
            from ddpdoctor.probes.procs import listeners_on
            holders = "; ".join(f"pid {h.pid} ({h.name})" for h in listeners_on(self.port) if h.pid)
            return f"port {self.port} is already in use{' by ' + holders if holders else ''}: pick another MASTER_PORT"
        return f"rank {self.rank} could not reach the store at {self.master}:{self.port}: is rank 0 running? " \
               f"`ddpdoctor network --master {self.master} --port {self.port}` checks the path"

    def _hint(self, e: BaseException) -> str:
        text = str(e)
        if "closed by peer" in text or "Connection reset" in text:
            return "a peer rank went away in the middle of the collective"
        if "Timed out" in text or "timeout" in text.lower():
            return "a peer never took part in the collective"
        return ""

    def _nvml(self, stage: str) -> None:
        if self.record["gpu"] is None:
            return
        from ddpdoctor.probes.nvml import snapshot
        snap = snapshot().to_dict()
        self.record["gpu"]["snapshots"][stage] = snap["gpus"] if snap["available"] else []

    def _collectives(self) -> None:
        torch, dist, cfg = self.torch, self.dist, self.cfg
        self.enter(P.BACKEND)
        from ddpdoctor.facts.settings import settings_of
        from ddpdoctor.probes.nvml import snapshot, visible_gpu
        self.record["settings"] = settings_of(os.environ)
        snap = snapshot()  # before anything can touch CUDA: is_available() does not create a context
        gpus = snap.to_dict()["gpus"]
        self.record["gpu"] = {"nvml": {"available": snap.available, "error": snap.error, "driver": snap.driver},
                              "expected": visible_gpu(self.local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus),
                              "snapshots": {P.NVML_BEFORE: gpus}}
        if snap.driver:
            self.record["versions"]["driver"] = snap.driver
        has_gpu = torch.cuda.is_available() and self.local_rank < torch.cuda.device_count()
        self.record["has_gpu"] = has_gpu
        self.record["versions"]["cuda"] = torch.version.cuda
        if has_gpu:
            try:
                v = torch.cuda.nccl.version()  # a tuple (2, 21, 5); an int 2708 in old releases
                self.record["versions"]["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception:  # noqa: BLE001 - a build without NCCL
                pass
        # every rank waits here until all have arrived (with the start-up allowance: a slow import
        # elsewhere is not a hang), then all agree on the backend
        self.store.set(f"gpu/{self.rank}", "1" if has_gpu else "0")
        keys = [f"gpu/{r}" for r in range(self.world)]
        with self.waiting():
            self.store.wait(keys, datetime.timedelta(seconds=cfg.startup_timeout))
        if cfg.backend == "auto":
            self.backend = "nccl" if all(v == b"1" for v in self._multi_get(self.store, keys)) else "gloo"
        else:
            self.backend = cfg.backend
        self.record["backend"] = self.backend
        self.chan.send({"t": "backend", "backend": self.backend})
        self.plan = P.phases(cfg, self.backend, self.world)
        gpu = self.backend == "nccl"
        device = torch.device("cuda", self.local_rank) if gpu else torch.device("cpu")
        if gpu and cfg.fix_round:
            torch.cuda.set_device(self.local_rank)  # the fix: bind the device before any CUDA call
        if cfg.preamble:
            self.enter(P.PREAMBLE)
            import runpy
            runpy.run_path(cfg.preamble, run_name="__ddpdoctor_preamble__")
            if gpu and cfg.fix_round:
                torch.cuda.empty_cache()
        self.enter(P.INIT)
        kw: dict[str, Any] = {}
        if gpu and cfg.fix_round:
            kw["device_id"] = device
        # the process-group timeout outlasts --timeout, so that our watchdog names the culprit first
        with self.waiting():
            dist.init_process_group(self.backend, store=dist.PrefixStore("pg", self.store), rank=self.rank,
                                    world_size=self.world, timeout=datetime.timedelta(seconds=cfg.timeout + 30), **kw)
        self._nvml(P.NVML_AFTER_INIT)
        if gpu:
            if not cfg.fix_round:
                torch.cuda.set_device(self.local_rank)  # where most training scripts call it: after init
            self.record["device"] = f"cuda:{self.local_rank}"
            props = torch.cuda.get_device_properties(self.local_rank)
            self.record["gpu_name"] = props.name
            uuid = str(getattr(props, "uuid", "") or "")
            if uuid:
                self.record["device_uuid"] = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
                exp = self.record["gpu"]["expected"]
                for g in gpus:  # the UUID CUDA reports beats the CUDA_VISIBLE_DEVICES guess
                    if g["uuid"] == self.record["device_uuid"]:
                        exp.update(index=g["index"], uuid=g["uuid"], how=f"torch: cuda:{self.local_rank} is {g['uuid']}")
        first = True
        for step in P.correctness_steps(cfg, self.backend, self.world):
            self.enter(step.phase)
            self.record["correctness"].append(self._step(step, device))
            if first:
                self._nvml(P.NVML_AFTER_FIRST)
                first = False
        if gpu:
            self.enter("gloo all_reduce")
            self._gloo_next_to_nccl()
        for size in P.bandwidth_sizes(cfg):
            self.enter(f"bandwidth {P.fmt_bytes(size)}")
            self.record["bandwidth"].append(self._bandwidth(size, device))

    def _multi_get(self, store, keys):
        return store.multi_get(keys) if hasattr(store, "multi_get") else [store.get(k) for k in keys]

    def _step(self, step: P.Step, device) -> dict[str, Any]:
        torch, dist = self.torch, self.dist
        t = time.perf_counter()
        entry: dict[str, Any] = {"op": step.op, "dtype": step.dtype, "size": step.size, "src": step.src}
        if step.op == "barrier":
            with self.waiting():
                if device.type == "cuda" and self.cfg.fix_round:
                    dist.barrier(device_ids=[self.local_rank])
                else:
                    dist.barrier()
            entry.update(ok=True, time_s=round(time.perf_counter() - t, 6))
            return entry
        dtype = getattr(torch, step.dtype)
        n = max(1, step.size // torch.empty((), dtype=dtype).element_size())
        if step.op == "all_reduce":
            value, expected, ones = P.contribution(self.rank, self.world, step.dtype)
            if self.zero_phase == self.phase:
                value = 0
            x = torch.full((n,), value, dtype=dtype, device=device)
            with self.waiting():
                dist.all_reduce(x)
            entry["ones"] = ones
        else:
            expected = step.src + 1
            x = torch.full((n,), expected if self.rank == step.src else 0, dtype=dtype, device=device)
            with self.waiting():
                dist.broadcast(x, step.src)
        bad = x != expected
        if bool(bad.any()):
            i = int(bad.nonzero()[0].item())
            entry.update(ok=False, first_bad={"index": i, "got": x[i].item(), "expected": expected})
        else:
            entry["ok"] = True
        entry["time_s"] = round(time.perf_counter() - t, 6)
        return entry

    def _gloo_next_to_nccl(self) -> None:
        torch, dist = self.torch, self.dist
        try:
            x = torch.full((4,), float(self.rank + 1))
            with self.waiting():
                g = dist.new_group(backend="gloo")
                dist.all_reduce(x, group=g)
            expected = self.world * (self.world + 1) / 2
            self.record["gloo_cpu"] = {"ok": bool((x == expected).all())}
        except Exception as e:  # noqa: BLE001 - DD506 reports it; the NCCL part goes on
            self.record["gloo_cpu"] = {"ok": False, "error": _short(e)}

    def _bandwidth(self, size: int, device) -> dict[str, Any]:
        torch, dist = self.torch, self.dist
        x = torch.zeros(max(1, size // 4), dtype=torch.float32, device=device)  # zeros: no overflow across iterations
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        warmup, iters = P.bandwidth_iters(size)
        times = []
        with self.waiting():
            for _ in range(warmup):
                dist.all_reduce(x)
            sync()
            for _ in range(iters):
                t = time.perf_counter()
                dist.all_reduce(x)
                sync()
                times.append(time.perf_counter() - t)
        entry = {"size": size, "warmup": warmup, "iters": iters, "times": [round(s, 7) for s in times]}
        if os.environ.get(BENCH_VAR):
            entry["reference_times"] = self._reference_loop(x, warmup, iters)
        return entry

    def _reference_loop(self, x, warmup: int, iters: int) -> list[float]:
        """benchmarks/bench_smoke.py only: the plainest timing loop, on the same group, tensor and
        iteration counts, right after ddpdoctor's own measurement (CPU tensors: no sync needed)."""
        dist = self.dist
        with self.waiting():
            for _ in range(warmup):
                dist.all_reduce(x)
            out = []
            for _ in range(iters):
                t = time.perf_counter()
                dist.all_reduce(x)
                out.append(time.perf_counter() - t)
        return out

    # ------------------------------------------------------------------ report
    def _report(self) -> int:
        self.enter(P.REPORT)
        store = self.store
        store.set(f"rec/{self.rank}", json.dumps(self.record, default=str))
        self.chan.send({"t": "record", "record": self.record})
        if self.rank == 0:
            keys = [f"rec/{r}" for r in range(self.world)]
            with self.waiting():
                while not store.check(keys):  # the watchdog ends this wait if a rank never posts
                    time.sleep(0.02)
            records = {str(r): json.loads(v) for r, v in zip(range(self.world), self._multi_get(store, keys))}
            from ddpdoctor.facts.gpu import misplaced
            rerun = bool(self.cfg.fix and not self.cfg.fix_round
                         and misplaced({int(k): v for k, v in records.items()}))
            with self.finish_lock:
                if self.finished:
                    return 1
                self.finished = True
                world = self._world(records, None)
                world["rerun_fix"] = rerun
                self.chan.send({"t": "world", "world": world})
            store.set("done", json.dumps({"rerun_fix": rerun}))
            deadline = time.monotonic() + 3.0  # keep the store up until the others have read `done`
            while self.world > 1 and time.monotonic() < deadline and int(store.add("bye", 0)) < self.world - 1:
                time.sleep(0.01)
        else:
            deadline = time.monotonic() + self.cfg.timeout + 10
            with self.waiting():
                while not store.check(["done"]):
                    if time.monotonic() > deadline:
                        self.chan.send({"t": "aborted", "kind": "no report from rank 0"})
                        return 1
                    time.sleep(0.02)
            done = json.loads(store.get("done"))
            self.chan.send({"t": "done", **done})
            store.add("bye", 1)
        self.enter(P.DONE)
        self.chan.send({"t": "hb", **self.hb()})
        try:
            if self.dist.is_initialized():
                self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the results are out; nothing to do about a teardown error
            pass
        return 1 if self.record["error"] else 0


def main() -> None:
    try:  # die with the supervisor even if it is SIGKILLed (Linux: PR_SET_PDEATHSIG)
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:  # noqa: BLE001 - not Linux: the beat thread watches the parent pid instead
        pass
    code = Worker().run()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: torch's atexit work adds ~0.2 s and nothing we need


if __name__ == "__main__":
    main()
