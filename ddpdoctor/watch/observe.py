"""One node's view of the job each tick: the ranks here, read with watch/sample.py, as plain dicts.

The same dicts are judged locally (watch/judge.py) or sent to the first node (`--gather`).
Schedule (justified in docs/watch.md, measured by benchmarks/bench_watch.py):
- /proc of every rank every tick (1 s);
- one stack sample of every rank every STACK_EVERY_S (30 s), and every DENSE_EVERY_S while a rank's main
  thread has stopped moving (that is when a hang must be confirmed within seconds: a hang's verdict needs
  only the dense samples, so the slow schedule costs no time, and while every rank moves the straggler
  judgement reads py-spy record's samples, not these; a `py-spy dump` is ≈23 ms of CPU with torch loaded,
  measured beside a 2-rank job: every 8 s that was 0.3 % of a core per rank, every 30 s 0.08 %);
- a rank whose main thread waits in a DataLoader: its worker processes too (where the batch is stuck);
- which processes are ranks: a whole-/proc scan (probes/ranks.py, 12-29 ms of CPU with a few hundred
  processes) when the launchers' children change (an elastic restart, ranks still starting, a rank gone:
  /proc/<launcher>/task/*/children, ≈0.05 ms a tick) and else every FIND_EVERY_S as a safety net (a new
  rank under a launcher watch did not know); every 10 s it was 0.27 % of a core a node, the largest
  part of watch's own CPU (benchmarks/bench_watch_parts.py); each rank's CPU cgroup again
  every CGROUP_EVERY_S (a cap may be applied later; two small reads a rank);
- the node's egress shapers' counters every QDISC_EVERY_S (a node whose outgoing traffic is rate-limited);
- ranks running torch's debug server: their collective sequence numbers, polled by watch/seqfeed.py's own
  thread (a rank's newest poll rides on its observation once as "seq"); in auto mode, whether a rank runs
  one (its threads' names) at start and every SEQCHECK_EVERY_S until one does.
"""
from __future__ import annotations

import os
import socket
import sys
import time
import zlib
from collections import deque
from typing import Any

from ddpdoctor.inspect.where import COLLECTIVES
from ddpdoctor.watch import corescan, netstuck, seqfeed
from ddpdoctor.watch.gpuwait import GpuWatch
from ddpdoctor.watch import ranks as rankmod
from ddpdoctor.watch.record import Recorder
from ddpdoctor.watch.sample import ExitWatch, cpu_stat_path, describe_exit, proc_tick, qdiscs, stacks, throttled_ns

STACK_EVERY_S = 30.0
DENSE_EVERY_S = 2.0
FIND_EVERY_S = 60.0     # the whole-/proc scan when no launcher's children changed
FIND_SOON_S = 2.0       # at most one scan this often when they change; doubled after each scan that found
FIND_SOON_MAX_S = 16.0  # no new rank, up to this (a parent shell that keeps forking other commands)
CGROUP_EVERY_S = 5.0
SEQCHECK_EVERY_S = 30.0  # a rank's threads' names (a worker server started later): a read per thread
QDISC_EVERY_S = 5.0   # the node's egress shapers (one rtnetlink dump, 0.12 ms): a rate-limited node


_HAS_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
_FIND_EVERY = FIND_EVERY_S if _HAS_CHILDREN else 10.0   # no children to follow: the old 10 s cadence


def _sig(signature: tuple) -> str:
    return format(zlib.crc32(repr(signature).encode()), "08x")


class NodeView:
    def __init__(self, pid: int | None = None, host: str | None = None, dump_timeout: float = 3.0,
                 record: bool = True, debug_server: str = "auto"):
        self.pid = pid
        self.host = host or socket.gethostname()
        self.dump_timeout = dump_timeout
        self.job, found, self.other_jobs = rankmod.find(pid)
        self.ranks: dict[int, rankmod.Rank] = {r.pid: r for r in found}
        self.exits = ExitWatch()
        for r in found:
            self.exits.add(r.pid)
        self.reported_gone: set[int] = set()
        self._next_stack = 0.0
        self._next_find = time.monotonic() + _FIND_EVERY
        self._last_find = time.monotonic()
        self._soon = FIND_SOON_S
        self._kids = self._launcher_children()
        self.loader_ranks: set[int] = set()   # pids whose main thread waits in a DataLoader
        self.recorder = Recorder() if record else None
        self.cgroup: dict[int, str | None] = {}
        self._next_qdisc = 0.0
        self._next_cgroup = time.monotonic() + CGROUP_EVERY_S
        self.cores = corescan.CoreScan()   # who else runs on a rank's CPU, while one waits for a CPU
        self._delay: dict[int, deque] = {}   # pid -> (t, delay ns) of its last ticks
        self.gpu = GpuWatch()   # a rank that spins in the CUDA driver at one Python line (watch/gpuwait.py)
        # torch's debug server in the ranks: their collective sequence numbers (watch/seqfeed.py)
        self.debug_server = debug_server
        self.seqfeed = seqfeed.for_ranks(found, debug_server, self.note)
        self._seq_seen: dict[int, float] = {}
        self._next_seqcheck = time.monotonic() + SEQCHECK_EVERY_S

    def note(self, line: str) -> None:
        """A line for the user that is not an event (a source of evidence missing): stderr, so that --json's
        stdout stays events only; under --gather each node's own stderr reaches srun's."""
        sys.stderr.write(f"ddpdoctor watch: {self.host}: {line}\n")
        sys.stderr.flush()

    def _launcher_children(self) -> dict[int, tuple[int, ...]] | None:
        """The children of every process that started a rank (agent, wrapper, parent): an elastic restart,
        a rank that starts late or one that is gone changes them. None where /proc cannot list children
        (a kernel without CONFIG_PROC_CHILDREN): then the scan keeps its old 10 s cadence."""
        if not _HAS_CHILDREN:
            return None
        parents = {p for r in self.ranks.values() for p in (r.ppid, r.agent, *r.wrappers) if p and p > 1}
        return {p: tuple(rankmod.children(p)) for p in sorted(parents)}

    def refind(self, now: float) -> None:
        self._rescan(now)
        if self.seqfeed is None and self.debug_server == "auto" and now >= self._next_seqcheck:
            self._next_seqcheck = now + SEQCHECK_EVERY_S  # a server started after watch did
            self.seqfeed = seqfeed.for_ranks([self.ranks[p] for p in self.ranks if p not in self.reported_gone],
                                             "auto", self.note)

    def _rescan(self, now: float) -> None:
        kids = None
        if now < self._next_find:
            if now - self._last_find < self._soon:
                return
            kids = self._launcher_children()
            if kids is None or kids == self._kids:
                return
            self._soon = min(2 * self._soon, FIND_SOON_MAX_S)   # back to FIND_SOON_S when it finds a rank
        self._last_find = now
        self._next_find = now + _FIND_EVERY
        self._kids = kids if kids is not None else self._launcher_children()
        try:
            job, found, others = rankmod.find(self.pid if self.pid in self.ranks or self.pid is None else None)
        except rankmod.NoJob:
            return
        if job != self.job and self.pid is None:
            return  # stay with the job we watch
        self.other_jobs = others
        for r in found:
            if r.job == self.job and r.pid not in self.ranks:
                self.ranks[r.pid] = r
                self.exits.add(r.pid)
                self._kids = None   # new parents to follow: their children are read on the next tick
                self._soon = FIND_SOON_S
                if self.seqfeed is not None:
                    self.seqfeed.add([r])

    def ended(self) -> bool:
        return bool(self.ranks) and all(pid in self.reported_gone for pid in self.ranks)

    def observe(self, now: float, want_stacks: bool) -> list[dict[str, Any]]:
        self.refind(now)
        if now >= self._next_cgroup:
            self._next_cgroup = now + CGROUP_EVERY_S
            self.cgroup.clear()
        live = [pid for pid in self.ranks if pid not in self.reported_gone]
        dense = want_stacks or self.gpu.wants(now)
        take = now >= self._next_stack or (dense and now >= self._next_stack - (STACK_EVERY_S - DENSE_EVERY_S))
        samples = {}
        workers: dict[int, list[int]] = {}
        chunks = {}
        if self.recorder is not None:
            done = self.recorder.collect()
            for c in done:
                self.gpu.note_chunk(c.pid, now, c.samples, self.recorder.chunk_s)
            chunks = {c.pid: summarize(c.samples) for c in done}
            self.recorder.ensure(live)
        if take:
            self._next_stack = now + STACK_EVERY_S
            for pid in self.loader_ranks & set(live):
                workers[pid] = rankmod.children(pid)
            helpers = {w for ws in workers.values() for w in ws}
            samples = stacks(live + sorted(helpers), self.dump_timeout, helpers)
            self.gpu.note_samples(now, {p: s for p, s in samples.items() if p not in helpers})
        gpu = self.gpu.tick(now, live)
        if want_stacks and self.seqfeed is not None:
            self.seqfeed.dense(now)
        qd = None
        if now >= self._next_qdisc:
            self._next_qdisc = now + QDISC_EVERY_S
            qd = qdiscs()
        out = []
        ticks = {pid: proc_tick(pid, now) for pid in live}
        near = self.cores.near(now, {pid: (tk.cpu, self._delay_share(pid, tk, now)) for pid, tk in ticks.items()
                                     if tk.state not in ("gone", "Z", "X")})
        for pid in live:
            r = self.ranks[pid]
            tk = ticks[pid]
            if pid not in self.cgroup:  # cleared every CGROUP_EVERY_S: a cap may be applied later
                self.cgroup[pid] = cpu_stat_path(pid)
            rec = {"rank": r.rank, "host": self.host, "pid": pid, "world_size": r.world_size,
                   "local_rank": r.local_rank, "state": tk.state, "run_ns": tk.run_ns, "delay_ns": tk.delay_ns,
                   "io": tk.io_bytes, "throttled_ns": throttled_ns(self.cgroup[pid]),
                   "cgroup": (self.cgroup[pid] or "").removesuffix("/cpu.stat"), "stack": _stack(samples.get(pid))}
            if tk.state in ("gone", "Z", "X"):
                time.sleep(0.01)  # the exit watcher reads the status the moment the pidfd fires
                status = self.exits.codes.get(pid, tk.exit_code)
                rec.update(state="gone", exit=status, exit_text=describe_exit(status),
                           exit_t=self.exits.when.get(pid, now))
                self.reported_gone.add(pid)
            if rec["stack"] and rec["stack"].get("where", {}).get("kind") == "dataloader":
                self.loader_ranks.add(pid)
            elif rec["stack"] and rec["stack"]["ok"]:
                self.loader_ranks.discard(pid)
            if tk.cpu >= 0:
                rec["cpu"] = tk.cpu
            if pid in near:
                rec["core"] = near[pid]
            if pid in chunks:
                rec["rec"] = chunks[pid]
            if pid in gpu:
                rec["gpu"] = gpu[pid]
            if (seq := seqfeed.observation(self.seqfeed, r.rank, self._seq_seen)) is not None:
                rec["seq"] = seq
            if qd is not None:
                rec["qdisc"] = qd
            if want_stacks and take:  # only while a rank is still: a hang's network side
                rec["tcp"] = netstuck.sockets(pid)
            if pid in workers:
                rec["workers"] = [{"pid": w, "state": (wt := proc_tick(w, now)).state, "run_ns": wt.run_ns,
                                   "delay_ns": wt.delay_ns, "io": wt.io_bytes, "stack": _stack(samples.get(w))}
                                  for w in workers[pid]]
            out.append(rec)
        return out

    def _delay_share(self, pid: int, tk, now: float) -> float:
        """The share of the last ≈5 s its main thread waited for a CPU (schedstat run_delay)."""
        q = self._delay.setdefault(pid, deque(maxlen=6))
        q.append((now, tk.delay_ns))
        t0, d0 = q[0]
        return (tk.delay_ns - d0) / 1e9 / (now - t0) if now - t0 >= 1.0 else 0.0

    def close(self):
        self.exits.close()
        self.gpu.close()
        if self.seqfeed is not None:
            self.seqfeed.close()
        if self.recorder is not None:
            self.recorder.close()


def _stack(s) -> dict[str, Any] | None:
    if s is None:
        return None
    if not s.ok:
        return {"ok": False, "error": s.error, "kind": s.kind}
    return {"ok": True, "where": s.where, "inner": s.inner, "sig": _sig(s.signature), "active": s.active}


def is_wait(frames) -> bool:
    """A sample (frames outermost first) inside a torch.distributed collective: the rank waits for its peers."""
    return any(f[1].startswith("torch/distributed/") and f[0].rsplit(".", 1)[-1] in COLLECTIVES for f in frames)


def _user_line(frames) -> str:
    for name, file, line in reversed(frames):  # innermost first
        if file.startswith(("torch/", "<")) or file.split("/", 1)[0].removesuffix(".py") in _STDLIB:
            continue
        return f"{name} {file}:{line}"
    return "?"


_STDLIB = frozenset(sys.stdlib_module_names)


def in_backward(frames) -> bool:
    """A sample inside autograd's backward (torch/autograd/): where DDP waits for its gradients' all-reduce."""
    return any(f[1].startswith("torch/autograd/") for f in frames)


def summarize(samples) -> dict[str, Any]:
    """A record chunk as numbers: samples, samples waiting in a collective, samples in backward (not in a
    collective: watch/straggler.py, DDP), the top lines of the rest."""
    from collections import Counter
    n = w = b = 0
    lines: Counter = Counter()
    for frames, count in samples:
        n += count
        if is_wait(frames):
            w += count
        else:
            b += count if in_backward(frames) else 0
            lines[_user_line(frames)] += count
    return {"n": n, "wait": w, "bwd": b, "lines": dict(lines.most_common(8))}
