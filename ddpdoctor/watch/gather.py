"""`watch --gather`: every node watches its own ranks; their views meet on the first node, which judges.

    srun --jobid <id> --overlap -N <n> --ntasks-per-node 1 ddpdoctor watch --gather

Where a task sits comes from inspect's meeting code (ddpdoctor/inspect/gather.py: detect_step, the
step's first node, the run id `job.step`). `inspect --gather` sends one view and is done; `watch`
keeps one TCP connection per node open and sends one JSON line per tick (the node's rank dicts,
≈300 bytes a rank), so the first node judges every rank of the job together, as if it were local.
Only JSON is read (nothing received can execute code), lines that name this step, within a size cap.
"""
from __future__ import annotations

import json
import os
import queue
import socket
import threading
import time
from typing import Any

from ddpdoctor.inspect.gather import Step, detect_step, listen_any
from ddpdoctor.validate import BadInput
from ddpdoctor.watch import loop
from ddpdoctor.watch.judge import Judge

MAX_LINE = 4 << 20
QUIET_S = 15.0   # a node that sent nothing for this long while the job runs is reported as silent


class Gathered:
    """The first node's source: its own NodeView plus the lines the other nodes send."""

    def __init__(self, step: Step, view, srv: socket.socket):
        self.step, self.view, self.srv = step, view, srv
        self.q: queue.Queue = queue.Queue()
        self.last: dict[int, float] = {}
        self.ended_nodes: set[int] = set()
        self.errors: dict[int, str] = {}
        self.ranks = view.ranks if view else {}
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        self.srv.settimeout(0.5)
        while not self._stop:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            conn.settimeout(QUIET_S * 4)
            f = conn.makefile("rb")
            while not self._stop:
                try:
                    ln = f.readline(MAX_LINE)
                except OSError:
                    return
                if not ln:
                    return
                try:
                    msg = json.loads(ln)  # JSON only
                except ValueError:
                    continue
                idx = msg.get("index") if isinstance(msg, dict) else None
                if msg.get("run") != self.step.run_id or type(idx) is not int or not 0 < idx < self.step.world:
                    continue
                self.last[idx] = time.monotonic()
                if msg.get("error"):
                    self.errors[idx] = str(msg["error"])[:300]
                if isinstance(msg.get("obs"), list):
                    self.q.put([o for o in msg["obs"] if isinstance(o, dict)])
                if msg.get("ended"):
                    self.ended_nodes.add(idx)

    def observe(self, now: float, want_stacks: bool) -> list[dict[str, Any]]:
        out = self.view.observe(now, want_stacks) if self.view else []
        while True:
            try:
                out.extend(self.q.get_nowait())
            except queue.Empty:
                break
        return [o for o in out if _valid(o)]

    def ended(self) -> bool:
        me = self.view is None or self.view.ended()
        others = all(i in self.ended_nodes or i in self.errors for i in range(1, self.step.world))
        return me and others

    def close(self):
        self._stop = True
        self.srv.close()
        if self.view:
            self.view.close()


def _valid(o: dict) -> bool:
    return (type(o.get("rank")) is int and type(o.get("pid")) is int and isinstance(o.get("host"), str)
            and all(type(o.get(k)) is int for k in ("run_ns", "delay_ns", "io")) or o.get("state") == "gone")


def _view(wait_s: float, host: str, debug_server: str = "auto"):
    from ddpdoctor.watch.observe import NodeView
    from ddpdoctor.watch.ranks import NoJob
    end = time.monotonic() + wait_s
    while True:
        try:
            return NodeView(None, host=host, debug_server=debug_server), ""
        except NoJob as e:
            if time.monotonic() >= end:
                return None, str(e)
            time.sleep(0.5)


def run_gather(emit, *, port: int, deadline: float | None, wait_s: float, events_file: str | None,
               debug_server: str = "auto") -> int:
    step = detect_step(os.environ, port=port)
    if not step.representative:
        return 0  # another task on this node speaks for it
    if step.index == 0:
        try:
            srv = listen_any(step.port)
        except OSError as e:
            raise BadInput(f"--gather: could not listen on port {step.port}: {e.strerror or e}") from None
        view, err = _view(wait_s, step.node, debug_server)
        src = Gathered(step, view, srv)
        if view is None:
            src.errors[0] = err
        path = events_file or (loop.events_path(r.env for r in view.ranks.values()) if view else None)
        return loop.run(src, emit, deadline=deadline, events_file=path)
    return _send(step, deadline=deadline, wait_s=wait_s, debug_server=debug_server)


def _send(step: Step, *, deadline: float | None, wait_s: float, debug_server: str = "auto") -> int:
    """Every other node: watch locally, send each tick's rank dicts to the first node."""
    t0 = time.monotonic()
    view, err = _view(wait_s, step.node, debug_server)
    judge = Judge()  # only to know when stacks are wanted: the first node judges
    conn = None
    try:
        while True:
            now = time.monotonic()
            if view is None:
                msg = {"run": step.run_id, "index": step.index, "error": f"{step.node}: {err}", "ended": True}
            else:
                obs = view.observe(now, judge.wants_stacks(now))
                judge.feed(obs, now)
                msg = {"run": step.run_id, "index": step.index, "obs": obs, "ended": view.ended()}
            done = msg["ended"] or (deadline is not None and now - t0 >= deadline)
            for _ in range(2):
                try:
                    if conn is None:
                        conn = socket.create_connection((step.first, step.port), timeout=5)
                    conn.sendall(json.dumps(msg).encode() + b"\n")
                    break
                except OSError:
                    if conn is not None:
                        conn.close()
                    conn = None
            if done:
                return 0
            time.sleep(max(0.0, loop.TICK_S - (time.monotonic() - now)))
    except KeyboardInterrupt:
        return 0
    finally:
        if conn is not None:
            conn.close()
        if view is not None:
            view.close()
