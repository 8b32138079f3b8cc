"""`watch` re-reads which processes are ranks (a whole-/proc scan, its largest own cost) only when a
launcher's children change, and every FIND_EVERY_S as a safety net: real processes, a real launcher that
starts a second worker (as torchrun does after an elastic restart); probes/ranks.py's answer is given
(tests/test_ranks.py and tests/test_watch_ranks.py pin it), the scan is counted."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ddpdoctor.probes.ranks import Rank
from ddpdoctor.watch import observe

pytestmark = pytest.mark.torchjob   # real processes (a launcher and its workers)

LAUNCHER = ("import subprocess, sys, time\n"
            "kids = [subprocess.Popen(['sleep', '60'])]\n"
            "print(kids[0].pid, flush=True)\n"
            "for line in sys.stdin:\n"
            "    if line.strip() == 'start':\n"
            "        kids.append(subprocess.Popen(['sleep', '60']))\n"
            "        print(kids[-1].pid, flush=True)\n"
            "    elif line.strip() == 'reap':\n"
            "        kids[0].kill(); kids[0].wait()\n"
            "        print('reaped', flush=True)\n")


def rank(i, pid, agent):
    return Rank(rank=i, pid=pid, ppid=agent, local_rank=i, world_size=2, local_world_size=2, launcher="torchrun",
                source="RANK", job="test", state="S", cmdline="sleep 60", agent=agent)


@pytest.fixture
def launcher(monkeypatch):
    p = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first = int(p.stdout.readline())
    scans = []
    live = [rank(0, first, p.pid)]

    def find(pid=None, exclude=frozenset()):
        scans.append(time.monotonic())
        return "test", list(live), []
    monkeypatch.setattr(observe.rankmod, "find", find)
    yield p, live, scans
    for r in live:   # the workers it started, by pid
        try:
            os.kill(r.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.kill()
    p.wait()


def command(p, what):
    p.stdin.write(what + "\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


@pytest.mark.skipif(not observe._HAS_CHILDREN, reason="this kernel's /proc lists no children")
def test_a_worker_started_by_the_launcher_is_found_at_the_next_tick_and_nothing_else_rescans(launcher):
    p, live, scans = launcher
    nv = observe.NodeView(None, record=False)
    try:
        t0 = time.monotonic()
        assert len(scans) == 1  # the first find
        for dt in (3, 6, 9, 12, 20):   # nothing changed: no scan (the old cadence scanned every 10 s)
            nv.refind(t0 + dt)
        assert len(scans) == 1
        second = int(command(p, "start"))
        live.append(rank(1, second, p.pid))
        nv.refind(t0 + 23)
        assert len(scans) == 2 and second in nv.ranks
        nv.refind(t0 + 26)   # its own children are followed now: one scan to settle, then none
        nv.refind(t0 + 29)
        nv.refind(t0 + 32)
        assert len(scans) <= 3
        n = len(scans)
        assert command(p, "reap") == "reaped"   # a rank gone (reaped by its launcher) changes them too
        nv.refind(t0 + 35)
        assert len(scans) == n + 1
        nv.refind(t0 + 35 + observe.FIND_EVERY_S + 1)   # the safety net
        assert len(scans) == n + 2
    finally:
        nv.close()


@pytest.mark.skipif(not observe._HAS_CHILDREN, reason="this kernel's /proc lists no children")
def test_changes_coming_fast_scan_at_most_once_every_find_soon_s_and_less_while_they_bring_no_rank(launcher):
    p, live, scans = launcher
    nv = observe.NodeView(None, record=False)
    others: list[int] = []
    try:
        t0 = time.monotonic()
        live.append(rank(1, int(command(p, "start")), p.pid))
        nv.refind(t0 + observe.FIND_SOON_S / 2)
        assert len(scans) == 1
        nv.refind(t0 + observe.FIND_SOON_S + 0.1)
        assert len(scans) == 2 and len(nv.ranks) == 2
        # a launcher that keeps starting processes that are no ranks (a job script's shell running other
        # commands): the scans thin out to one every FIND_SOON_MAX_S, not one every tick
        t, at = t0 + 10, []
        for _ in range(12):
            others.append(int(command(p, "start")))   # a child that no scan calls a rank (find() answers `live`)
            t += 4
            nv.refind(t)
            at.append(len(scans))
        gaps = [b - a for a, b in zip(at, at[1:])]
        assert sum(gaps) <= 6 and gaps[-4:].count(1) <= 1, at
    finally:
        nv.close()
        for pid in others:
            os.kill(pid, signal.SIGKILL)
