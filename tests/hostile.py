"""Run one hostile input through ddpdoctor in a child with bounds: address space (RLIMIT_AS) and a
wall-clock timeout. The bounds the README promises for any input file: within 10 s and 1 GiB, a
verdict or one clear line and exit 2 — never a hang, a traceback or exit 3."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
GIB = 1 << 30


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    cpu_seconds: float = 0.0   # user + system CPU of the child and what it waited for: what load cannot inflate


def run_bounded(args, *, env=None, timeout=10.0, mem=GIB, stdin=subprocess.DEVNULL, cwd=None) -> Outcome:
    """`python -m ddpdoctor ARGS` with RLIMIT_AS = `mem` and a `timeout`; the child's group is
    killed when it overruns (a hang is a failure the caller asserts on, not a stuck test)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    full_env = {**os.environ, "PYTHONPATH": ROOT, "NO_COLOR": "1", **(env or {})}
    t0 = time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen([sys.executable, "-m", "ddpdoctor", *args], env=full_env, cwd=cwd, stdin=stdin,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        timed_out = True
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)   # tests run one at a time: the delta is this child's
    cpu = (ru.ru_utime - ru0.ru_utime) + (ru.ru_stime - ru0.ru_stime)
    return Outcome(p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                   time.monotonic() - t0, timed_out, cpu)


def assert_bounded(o: Outcome, *, codes=(0, 1, 2)) -> None:
    """Within the bounds, an exit code of a verdict or of bad input, no traceback."""
    assert not o.timed_out, f"overran its timeout ({o.seconds:.1f} s)\n{o.stderr[-2000:]}"
    assert o.returncode in codes, f"exit {o.returncode}\n{o.stdout[-1500:]}\n{o.stderr[-2000:]}"
    assert "Traceback" not in o.stderr and "MemoryError" not in o.stderr, o.stderr[-3000:]


def assert_one_line_refusal(o: Outcome) -> None:
    """Bad input: exit 2 and one line on stderr."""
    assert_bounded(o, codes=(2,))
    assert len(o.stderr.strip().splitlines()) == 1, o.stderr
