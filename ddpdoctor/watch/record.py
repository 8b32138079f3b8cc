"""Many cheap stack samples per rank for the straggler judgement: `py-spy record` in chunks.

A straggler at +10 % makes the others wait ≈9 % of each step longer than it does; telling 9 % apart
needs hundreds of samples per rank, which `py-spy dump` (a process start per sample, ≈17 ms of CPU)
cannot afford. `py-spy record --nonblocking --idle --rate 8 -d 10 --format raw` stays attached for
a 10 s chunk and writes the collapsed stacks at its end: 80 samples per rank per chunk, for
59-71 ms of CPU per chunk (≈25 ms to start, ≈0.45 ms a sample of a torch rank: py-spy lists every OS
thread and reads its state each sample), 0.6-0.7 % of a core, never pausing the job. It writes only at
the end (py-spy's record_samples, src/main.rs), so a chunk cannot stream; 20 s chunks (0.5 %) were
replayed on the recorded traces: the straggler verdicts came 0-15 s later (docs/watch.md "Numbers"),
so chunks stay at 10 s.
Only the main thread's samples count: the others' outermost frame is threading.py's bootstrap.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass

from ddpdoctor.probes import pyspy

CHUNK_S = 10
RATE_HZ = 8
_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")


@dataclass(frozen=True)
class Chunk:
    pid: int
    t_end: float
    samples: tuple[tuple[tuple[tuple[str, str, int], ...], int], ...]  # (frames outermost first, count)


def parse_raw(text: str) -> list[tuple[tuple[tuple[str, str, int], ...], int]]:
    """py-spy's raw (collapsed) format: `frame;frame;... count`, each frame `name (file:line)`,
    outermost first; the main thread's stacks only."""
    out = []
    for ln in text.splitlines():
        stack, _, n = ln.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = []
        for part in stack.split(";"):
            m = _FRAME.match(part)
            if m:
                frames.append((m["name"], m["file"], int(m["line"])))
        if frames and not (frames[0][1].endswith("threading.py") and "bootstrap" in frames[0][0]):
            out.append((tuple(frames), int(n)))
    return out


class Recorder:
    """One `py-spy record` chunk per pid at a time; finished chunks are handed out by `collect`."""

    def __init__(self, chunk_s: int = CHUNK_S, rate: int = RATE_HZ):
        self.chunk_s = chunk_s
        self.rate = rate
        self.exe = pyspy.binary()
        self.dir = tempfile.mkdtemp(prefix="ddpdoctor-watch-")
        self.running: dict[int, tuple[subprocess.Popen, str, float]] = {}

    def ensure(self, pids) -> None:
        if not self.exe:
            return
        for pid in pids:
            if pid in self.running:
                continue
            out = os.path.join(self.dir, f"{pid}.txt")
            try:
                p = subprocess.Popen([self.exe, "record", "--pid", str(pid), "--nonblocking", "--idle", "--rate",
                                      str(self.rate), "-d", str(self.chunk_s), "--format", "raw", "-o", out],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except OSError:
                continue
            self.running[pid] = (p, out, time.monotonic())

    def collect(self) -> list[Chunk]:
        done = []
        for pid, (p, out, t0) in list(self.running.items()):
            if p.poll() is None:
                if time.monotonic() - t0 > self.chunk_s + 10:  # py-spy stuck: never let one linger
                    p.kill()
                    p.wait()
                    del self.running[pid]
                continue
            del self.running[pid]
            try:
                with open(out, encoding="utf-8", errors="replace") as f:
                    text = f.read(8 << 20)
                os.unlink(out)
            except OSError:
                continue
            done.append(Chunk(pid, time.monotonic(), tuple(parse_raw(text))))
        return done

    def close(self) -> None:
        for p, out, _ in self.running.values():
            p.kill()
            p.wait()
        self.running.clear()
        for name in os.listdir(self.dir):
            try:
                os.unlink(os.path.join(self.dir, name))
            except OSError:
                pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass
