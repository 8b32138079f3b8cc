"""Runs worker processes and makes sure none outlives the run. No torch here.

Every worker starts in its own session (its own process group) with a pipe for messages
(channel.py) and its output in a temporary file. The supervisor reads heartbeats and kills a
worker whose heartbeat or phase stops for longer than the phase's limit plus a grace; whatever
happens, every worker's process group is SIGKILLed before `run()` returns.

Two shapes:
* standalone (`--nproc N`): one supervisor, N workers on this host. It sees every rank's progress
  through the pipes, so when rank 0 cannot report (it is the one stopped or killed), the
  supervisor reports instead, from the same facts.
* under a launcher (torchrun, srun, mpirun): one supervisor per rank, one worker each. Rank 0's
  worker relays every rank's progress to its supervisor, which reports from the last relay if
  rank 0 freezes. The supervisor of any other rank whose worker died keeps its slot open for a
  while, so that the launcher does not tear the job down before rank 0 has named the dead rank.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from ddpdoctor.smoke import plan as P
from ddpdoctor.smoke.channel import FD_VAR, read_messages
from ddpdoctor.smoke.progress import Tracker, describe_exit, make_verdict, process_state

TOKEN_VAR = "DDPDOCTOR_SMOKE_TOKEN"
_SUBREAPER = False  # set by become_subreaper() in the `smoke` command's own process
FALLBACK_S = 3.0  # standalone: how long rank 0 gets to report what the launcher sees as well
POLL_S = 0.25  # the loop also wakes at once on a worker's exit or final message (`wake`)


@dataclasses.dataclass
class WorkerProc:
    rank: int
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    log: Any = None
    started_at: float = 0.0
    last_msg_at: float = 0.0
    phase: str = P.START
    phase_seen_at: float = 0.0
    index: int = -1
    record: dict | None = None
    world: dict | None = None
    done: dict | None = None
    aborted: dict | None = None
    lost_store: dict | None = None
    exit: str | None = None
    killed: str | None = None  # why the supervisor killed it
    proc_state: str | None = None
    backend: str = ""
    reader: threading.Thread | None = None

    @property
    def finished(self) -> bool:
        return self.phase == P.DONE

    def log_tail(self, lines: int = 15) -> list[str]:
        if self.log is None:
            return []
        try:
            self.log.flush()
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - 16384))
            text = self.log.read().decode(errors="replace")
        except (OSError, ValueError):
            return []
        # torch prints C++ stack frames after store errors: they say nothing about the rank
        noise = re.compile(r"^\s*(frame #\d+|<omitting python frames>|Exception raised from )")
        return [line for line in text.splitlines() if line.strip() and not noise.match(line)][-lines:]


@dataclasses.dataclass
class Outcome:
    world: dict | None  # rank 0's world report, or the supervisor's own when rank 0 could not
    workers: dict[int, WorkerProc]
    fallback: bool = False
    signalled: str | None = None


class Supervisor:
    def __init__(self, cfg: P.SmokeConfig, workers: list[WorkerProc], world_size: int, *, standalone: bool):
        self.cfg = cfg
        self.workers = {w.rank: w for w in workers}
        self.world_size = world_size
        self.standalone = standalone
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.tracker = Tracker(world_size, cfg, time.monotonic())
        self.relayed: list[dict] = []  # rank 0's last view of every rank
        self.relayed_at = 0.0
        self.signalled: str | None = None
        self.wake = threading.Event()
        # What the ranks started (a --preamble's helpers) must not outlive the run, even in a session
        # of its own: found by this token in their environment, as descendants seen while the worker
        # lived, or as orphans re-parented to us (become_subreaper()).
        self.token = uuid.uuid4().hex
        self._spawned: set[tuple[int, float]] = set()

    # ------------------------------------------------------------------ messages
    def _on_message(self, w: WorkerProc, msg: dict) -> None:
        now = time.monotonic()
        with self.lock:
            w.last_msg_at = now
            t = msg.get("t")
            if t == "hb":
                if msg["i"] != w.index:
                    w.index, w.phase, w.phase_seen_at = msg["i"], msg["p"], now - float(msg.get("a") or 0)
                self.tracker.update(msg, now)
            elif t == "record":
                w.record = msg["record"]
            elif t == "world":
                w.world = msg["world"]
                self.wake.set()
            elif t == "progress":
                self.relayed, self.relayed_at = msg["states"], now
            elif t == "done":
                w.done = msg
            elif t == "aborted":
                w.aborted = msg
            elif t == "lost_store":
                w.lost_store = msg
            elif t == "backend":
                w.backend = msg["backend"]

    # ------------------------------------------------------------------ processes
    def _start(self, w: WorkerProc) -> None:
        r, wfd = os.pipe()
        env = dict(w.env)
        env[FD_VAR] = str(wfd)
        env[TOKEN_VAR] = self.token
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
        w.log = tempfile.TemporaryFile(prefix=f"ddpdoctor-smoke-rank{w.rank}-")
        try:
            w.proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor.smoke.worker"], env=env,
                                      stdin=subprocess.DEVNULL, stdout=w.log, stderr=subprocess.STDOUT,
                                      pass_fds=(wfd,), start_new_session=True, close_fds=True)
        finally:
            os.close(wfd)
        w.started_at = w.last_msg_at = w.phase_seen_at = time.monotonic()
        w.reader = threading.Thread(target=self._read, args=(w, r), name=f"pipe-rank{w.rank}", daemon=True)
        w.reader.start()

    def _read(self, w: WorkerProc, fd: int) -> None:
        read_messages(fd, lambda m: self._on_message(w, m))
        self.wake.set()  # EOF: the worker exited (or closed the pipe): look now, not at the next tick

    def _kill(self, w: WorkerProc, why: str | None = None) -> None:
        if w.proc is None:
            return
        if why and w.proc.poll() is None and w.killed is None:
            w.killed = why
            w.proc_state = process_state(w.proc.pid)
        if w.proc.poll() is None:
            self._spawned |= _descendants(w.proc.pid)  # before the kill re-parents them
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)  # the whole session: no grandchild survives
        except (ProcessLookupError, PermissionError):
            pass

    def _reap(self, w: WorkerProc, now: float) -> None:
        rc = w.proc.poll() if w.proc else 0
        if rc is None or w.exit is not None:
            return
        w.exit = describe_exit(rc)
        if w.reader:
            w.reader.join(timeout=2.0)  # its last messages (the world report) come before EOF
        if not w.finished and w.aborted is None and w.killed is None:  # it died on its own
            with self.lock:
                self.tracker.mark_exit(w.rank, w.exit, now)

    def _watchdog(self, w: WorkerProc, now: float) -> None:
        """Kill a worker whose own heartbeat or phase stopped for longer than its limit + grace."""
        if w.proc is None or w.proc.poll() is not None or w.finished:
            return
        grace = self.cfg.budget.kill_grace
        limit = self.cfg.limit_for(w.phase) + grace
        # rank 0's supervisor is the only one left to report a frozen rank 0: no grace for silence
        silent_limit = limit - grace if w.rank == 0 else limit
        if now - w.last_msg_at > silent_limit:
            self._kill(w, f"no heartbeat for {now - w.last_msg_at:.0f} s in phase '{w.phase}'")
        elif now - w.phase_seen_at > limit:
            self._kill(w, f"in phase '{w.phase}' for {now - w.phase_seen_at:.0f} s")

    def _on_signal(self, signum, _frame) -> None:
        self.signalled = signal.Signals(signum).name
        self.wake.set()

    # ------------------------------------------------------------------ the run
    def run(self) -> Outcome:
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            for w in self.workers.values():
                self._start(w)
            return self._loop()
        finally:
            for w in self.workers.values():
                self._kill(w)
            for w in self.workers.values():
                if w.proc is not None:
                    try:
                        w.proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
            self._kill_leftovers()
            for s, h in old.items():
                signal.signal(s, h)

    def _kill_leftovers(self) -> None:
        """SIGKILL what the ranks started and left running (setsid escapes killpg), then reap it."""
        try:
            import psutil
            procs = []
            for p in psutil.Process().children(recursive=True):
                try:
                    if (_SUBREAPER or (p.pid, p.create_time()) in self._spawned
                            or p.environ().get(TOKEN_VAR) == self.token):
                        procs.append(p)
                except (psutil.Error, OSError):
                    continue
            for p in procs:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(procs, timeout=3)
            # and the ones re-parented to init (no subreaper): only those we saw while their worker lived
            for pid, ctime in self._spawned:
                try:
                    p = psutil.Process(pid)
                    if p.create_time() == ctime:
                        p.kill()
                except (psutil.Error, OSError):
                    pass
        except Exception:  # noqa: BLE001 - cleanup must never turn a report into a crash
            pass

    def _loop(self) -> Outcome:
        from ddpdoctor.render.progress import Progress
        # standalone only: under torchrun/srun every rank has a supervisor, and N live lines on one
        # terminal would overwrite each other
        with Progress() as bar:
            bar.on = bar.on and self.standalone
            return self._loop_with(bar)

    def _phases_line(self, now: float) -> str:
        """`smoke: 8 ranks, 12 s: 6 in bandwidth, 2 in init` for the live line on a terminal."""
        with self.lock:
            phases = [w.phase or "starting" for w in self.workers.values() if w.exit is None]
        counts: dict[str, int] = {}
        for p in phases:
            counts[p] = counts.get(p, 0) + 1
        where = ", ".join(f"{n} in {p}" for p, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        return f"ddpdoctor smoke: {len(self.workers)} ranks, {now - self.t0:.0f} s: {where or 'finishing'}"

    def _loop_with(self, bar) -> Outcome:
        rank0 = self.workers.get(0)
        late_since: float | None = None
        world_at: float | None = None
        while True:
            now = time.monotonic()
            if bar.on:
                bar.update(self._phases_line(now))
            for w in self.workers.values():
                self._reap(w, now)
            if all(w.exit is not None for w in self.workers.values()):
                break
            if self.signalled:
                for w in self.workers.values():
                    self._kill(w, f"ddpdoctor got {self.signalled}")
                break
            if not self.standalone:
                for w in self.workers.values():
                    self._watchdog(w, now)
            elif rank0.world is not None:
                # rank 0 reported; the others exit on their own within a moment (after a verdict,
                # a stopped one never will)
                world_at = world_at or now
                if now - world_at > (1.0 if rank0.world.get("verdict") else self.cfg.budget.kill_grace):
                    for w in self.workers.values():
                        self._kill(w, "still running after rank 0's report")
            else:
                with self.lock:
                    late = self.tracker.late(now)
                late_since = (late_since or now) if late else None
                if late_since is not None and now - late_since > FALLBACK_S:
                    for w in self.workers.values():  # what each one is doing, before we end it
                        if w.proc is not None and w.proc.poll() is None:
                            w.proc_state = process_state(w.proc.pid)
                    break  # rank 0 did not report what we see as well: report it ourselves
            # a third busy process on two cores would slow the ranks' collectives: sleep until
            # something happens, or the next tick
            self.wake.wait(POLL_S)
            self.wake.clear()
        return self._outcome(time.monotonic())

    def _outcome(self, now: float) -> Outcome:
        for w in self.workers.values():
            self._kill(w, "the run ended")
        deadline = time.monotonic() + 5
        for w in self.workers.values():
            if w.proc is not None:
                try:
                    w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            self._reap(w, now)
        rank0 = self.workers.get(0)
        if rank0 is None:
            return Outcome(None, self.workers, signalled=self.signalled)
        if rank0.world is not None:
            return Outcome(self._annotate(rank0.world), self.workers, signalled=self.signalled)
        return Outcome(self._fallback_world(now), self.workers, fallback=True, signalled=self.signalled)

    def _annotate(self, world: dict) -> dict:
        """Add what only the supervisor knows (exit statuses, why it killed a worker) to rank 0's verdict."""
        verdict = world.get("verdict")
        if not verdict:
            return world
        for st in verdict.get("states", []):
            w = self.workers.get(st.get("rank"))
            if w is None or w.rank == 0:  # rank 0 exits by design once it has reported
                continue
            if w.exit and not w.finished and w.aborted is None and w.killed is None:
                st["exit"] = w.exit  # it died on its own: how
            if w.proc_state and not st.get("proc_state"):
                st["proc_state"] = w.proc_state
            if not st.get("seen") and w.proc is not None:  # never reached the store: only we know its pid
                st.setdefault("pid", w.proc.pid)
                st.setdefault("host", socket.gethostname())
        return world

    def _fallback_world(self, now: float) -> dict:
        """The report rank 0 could not write: every rank's progress as this supervisor saw it."""
        with self.lock:
            states = self.tracker.states(now)
            late = self.tracker.late(now)
            trouble = self.tracker.any_trouble()
        by_rank = {s["rank"]: s for s in states}
        if not self.standalone:  # only our own rank first-hand: the others as rank 0 last relayed them
            for s in self.relayed:
                if s.get("rank") not in self.workers:
                    by_rank[s["rank"]] = {**s, "relayed": True, "relay_age_s": round(now - self.relayed_at, 2)}
        for w in self.workers.values():
            st = by_rank.get(w.rank)
            if st is not None and st.get("seen"):
                st["proc_state"] = st.get("proc_state") or w.proc_state
                if w.killed and w.killed != "the run ended":
                    st["ended_by_ddpdoctor"] = w.killed
            elif st is not None and w.proc is not None:  # never reached the store: its process state says why
                st.update(proc_state=w.proc_state, pid=w.proc.pid, host=socket.gethostname())
            if not w.finished and w.rank not in late:
                late.append(w.rank)
        if self.signalled:
            detected = f"ddpdoctor, on {self.signalled} from outside (e.g. the launcher ending the job)"
        elif self.standalone:
            detected = "ddpdoctor's launcher (rank 0 could not report)"
        else:
            detected = "rank 0's supervisor (rank 0 could not report)"
        verdict = make_verdict([by_rank[r] for r in sorted(by_rank)], sorted(set(late)), trouble,
                               now - self.tracker.t0, detected, self.cfg)
        if self.signalled:
            verdict.update(kind="terminated", signal=f"by {self.signalled}")
        records = {str(w.rank): w.record for w in self.workers.values() if w.record}
        backend = next((w.backend for w in self.workers.values() if w.backend), "")
        return {"round": 2 if self.cfg.fix_round else 1, "backend": backend, "world_size": self.world_size,
                "records": records, "verdict": verdict, "duration_s": round(now - self.tracker.t0, 3)}


def _descendants(pid: int) -> set[tuple[int, float]]:
    try:
        import psutil
        return {(c.pid, c.create_time()) for c in psutil.Process(pid).children(recursive=True)}
    except Exception:  # noqa: BLE001 - gone already, or no psutil: the token scan remains
        return set()


def become_subreaper() -> None:
    """Orphans of our ranks re-parent to this process instead of init (Linux PR_SET_CHILD_SUBREAPER),
    so `_kill_leftovers` still finds a preamble's daemon after its rank exited. Call it only in the
    `ddpdoctor smoke` process itself, never in a library user's process."""
    global _SUBREAPER
    try:
        import ctypes
        # As the `smoke` command's own process, every child left after the workers were reaped is
        # something a rank started (even with a cleared environment): all of them go.
        _SUBREAPER = ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - not Linux: descendants seen while the worker lived are still killed
        pass


def hold_slot(cfg: P.SmokeConfig, since: float, is_signalled) -> None:
    """Under a launcher: a non-zero rank whose worker died stays alive until rank 0 has had time
    to name it; torchrun would otherwise end every rank, rank 0 included, at once."""
    deadline = since + cfg.budget.hold_slot
    while time.monotonic() < deadline and not is_signalled():
        time.sleep(0.1)
