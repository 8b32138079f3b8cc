"""The torch side of `ddpdoctor smoke`: one rank. Run only as a child process of a supervisor
(ddpdoctor/smoke/supervise.py), in its own session, with RANK/WORLD_SIZE/... and the configuration
in its environment: `python -m ddpdoctor.smoke.worker`.

This module is the sequence and the reporting to the supervisor; the work is in
  rendezvous.py     the TCPStore and the backend every rank agrees on;
  collectives.py    the correctness steps (and Gloo next to NCCL);
  bandwidth_run.py  the bandwidth timing loop;
  gpumem.py         the NVML snapshots;
  watchdog.py       the store monitor (rank 0's stall verdict);
  faults.py         the DDPDOCTOR_SMOKE_FAULT test hook (documented in docs/smoke.md).

Three threads:
  main     the phases: store, backend, init, collectives, bandwidth, report;
  beat     a heartbeat to the supervisor's pipe every 0.25 s (the supervisor's proof of life);
  monitor  the same heartbeat into the rendezvous store (watchdog.py).
Collectives release the interpreter lock while they wait, so beat and monitor keep running while
the main thread hangs in one (verified with Gloo: a peer's SIGSTOP blocks the all_reduce, the
monitor still beats).
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

from ddpdoctor.smoke import bandwidth_run, collectives, faults, gpumem, rendezvous
from ddpdoctor.smoke import plan as P
from ddpdoctor.smoke.channel import Channel
from ddpdoctor.smoke.collectives import short_error as _short
from ddpdoctor.smoke.faults import FAULT_VAR, parse_faults  # noqa: F401 - FAULT_VAR: the hook's name
from ddpdoctor.smoke.progress import heartbeat
from ddpdoctor.smoke.watchdog import BEAT_S, monitor_loop


def _category(phase: str) -> str:
    """Phase times are shown per category: correctness and bandwidth have many phases."""
    if phase.startswith("bandwidth"):
        return "bandwidth"
    if phase.startswith(("all_reduce", "broadcast", "barrier")):
        return "correctness"
    if phase.startswith("gloo"):
        return "gloo"
    return phase


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
        for f in faults.due(self.faults, self.rank, name):
            self._fire(f)

    def _fire(self, f: dict[str, Any]) -> None:
        deadline = time.monotonic() + 1.0  # let the store see this phase first, so the report can name it
        while self.mon is not None and self.published < self.index and time.monotonic() < deadline:
            time.sleep(0.01)
        if faults.fire(f["action"], self.phase):
            self.zero_phase = self.phase

    def _beat_loop(self) -> None:
        while True:
            if os.getppid() != self.ppid:
                os._exit(1)  # the supervisor is gone: nobody would ever reap or report us
            self.beat += 1
            self.chan.send({"t": "hb", **self.hb()})
            self.kick.wait(BEAT_S)
            self.kick.clear()

    def world_report(self, records: dict[str, Any], verdict: dict | None) -> dict[str, Any]:
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
            self.store, self.mon = rendezvous.connect_store(self.cfg, self.rank, self.master, self.port,
                                                            self.agent_store, self.prefix)
        except Exception as e:  # noqa: BLE001 - no store: nothing to tell the others, tell the supervisor
            hint = rendezvous.store_hint(e, self.rank, self.master, self.port, self.agent_store)
            self.record["error"] = {"phase": P.STORE, "message": _short(e), "hint": hint}
            self.chan.send({"t": "record", "record": self.record})
            return 1
        threading.Thread(target=monitor_loop, args=(self,), name="monitor", daemon=True).start()
        try:
            self._collectives()
        except Exception as e:  # noqa: BLE001 - a failed phase is a finding: report it, then wait for rank 0
            self.err = f"{self.phase}: {_short(e)}"
            self.record["error"] = {"phase": self.phase, "message": _short(e), "hint": collectives.failure_hint(e)}
            if os.environ.get("DDPDOCTOR_DEBUG"):
                traceback.print_exc()
        return self._report()

    def _nvml(self, stage: str) -> None:
        gpumem.add_snapshot(self.record["gpu"], stage)

    def _collectives(self) -> None:
        torch, dist, cfg = self.torch, self.dist, self.cfg
        self.enter(P.BACKEND)
        from ddpdoctor.facts.settings import settings_of
        self.record["settings"] = settings_of(os.environ)
        self.record["gpu"], driver = gpumem.first_snapshot(self.local_rank)
        if driver:
            self.record["versions"]["driver"] = driver
        has_gpu = torch.cuda.is_available() and self.local_rank < torch.cuda.device_count()
        self.record["has_gpu"] = has_gpu
        self.record["versions"]["cuda"] = torch.version.cuda
        if has_gpu:
            try:
                v = torch.cuda.nccl.version()  # a tuple (2, 21, 5); an int 2708 in old releases
                self.record["versions"]["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception:  # noqa: BLE001 - a build without NCCL
                pass
        self.backend = rendezvous.agree_backend(self.store, cfg, self.rank, self.world, has_gpu, self.waiting)
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
        # the process-group timeout outlasts our watchdog, so that it names the culprit first (budget.py)
        with self.waiting():
            dist.init_process_group(self.backend, store=dist.PrefixStore("pg", self.store), rank=self.rank,
                                    world_size=self.world, timeout=datetime.timedelta(seconds=cfg.budget.process_group), **kw)
        self._nvml(P.NVML_AFTER_INIT)
        if gpu:
            if not cfg.fix_round:
                torch.cuda.set_device(self.local_rank)  # where most training scripts call it: after init
            self.record["device"] = f"cuda:{self.local_rank}"
            props = torch.cuda.get_device_properties(self.local_rank)
            self.record["gpu_name"] = props.name
            uuid = gpumem.device_uuid(props)
            if uuid:
                self.record["device_uuid"] = uuid
                gpumem.pin_expected(self.record["gpu"], uuid, self.local_rank)
        first = True
        for step in P.correctness_steps(cfg, self.backend, self.world):
            self.enter(step.phase)
            self.record["correctness"].append(collectives.run_step(
                torch, dist, step, device, self.rank, self.world, self.local_rank, cfg.fix_round,
                self.zero_phase == self.phase, self.waiting))
            if first:
                self._nvml(P.NVML_AFTER_FIRST)
                first = False
        if gpu:
            self.enter("gloo all_reduce")
            self.record["gloo_cpu"] = collectives.gloo_next_to_nccl(torch, dist, self.rank, self.world, self.waiting)
        for size in P.bandwidth_sizes(cfg):
            self.enter(f"bandwidth {P.fmt_bytes(size)}")
            self.record["bandwidth"].append(bandwidth_run.measure(torch, dist, size, device, self.waiting))

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
            records = {str(r): json.loads(v) for r, v in zip(range(self.world), rendezvous.multi_get(store, keys))}
            from ddpdoctor.facts.gpu import misplaced
            from ddpdoctor.facts.smoke import records_of
            rerun = bool(self.cfg.fix and not self.cfg.fix_round and misplaced(records_of({"records": records})))
            with self.finish_lock:
                if self.finished:
                    return 1
                self.finished = True
                world = self.world_report(records, None)
                world["rerun_fix"] = rerun
                self.chan.send({"t": "world", "world": world})
            store.set("done", json.dumps({"rerun_fix": rerun}))
            deadline = time.monotonic() + 3.0  # keep the store up until the others have read `done`
            while self.world > 1 and time.monotonic() < deadline and int(store.add("bye", 0)) < self.world - 1:
                time.sleep(0.01)
        else:
            deadline = time.monotonic() + self.cfg.budget.report_wait
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
