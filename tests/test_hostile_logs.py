"""Hostile logs for `explain --log` (issue 21): a FIFO nobody writes to, /dev/zero, a link to /proc/kmsg (or any
file of /proc or /sys),
150 nested gzip layers, and a million watchdog lines: each within the bounds — memory that stays flat
as the log grows, one line and exit 2 where there is nothing to read."""
from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys

import pytest

from hostile import GIB, ROOT, assert_bounded, assert_one_line_refusal, run_bounded

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob


def test_a_fifo_without_a_writer_reads_as_an_empty_log(tmp_path):
    os.mkfifo(tmp_path / "log")
    o = run_bounded(["explain", "--log", str(tmp_path / "log"), "--json"])
    assert_bounded(o, codes=(0,))
    json.loads(o.stdout)


def test_a_pipe_with_a_writer_is_still_read(tmp_path):
    # what `explain --log <(zcat job.log.gz)` passes: /dev/fd/N, a pipe with a writer
    r, w = os.pipe()
    os.write(w, b"RuntimeError: Connection reset by peer\n")
    os.close(w)
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", "--log", f"/dev/fd/{r}"], pass_fds=(r,),
                       capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONPATH": ROOT})
    os.close(r)
    assert p.returncode == 0 and "line 1" in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_one_line_and_exit_2(path):
    assert_one_line_refusal(run_bounded(["explain", "--log", path]))


def test_stdin_from_dev_zero_is_one_line_and_exit_2():
    with open("/dev/zero", "rb") as z:
        assert_one_line_refusal(run_bounded(["explain", "--log", "-"], stdin=z))


@pytest.mark.parametrize("target", ["/proc/kmsg", "/proc/self/status", "/sys/kernel/mm/transparent_hugepage/enabled"])
def test_a_link_to_a_kernel_file_is_one_line_and_exit_2(tmp_path, target):
    # /proc/kmsg reads as empty, waits, or (root, messages pending) takes the kernel's messages from the system
    # logger; a /proc or /sys file is never a log: refused before any read, saying why
    if not os.path.exists(target):
        pytest.skip(f"{target} is not here")
    (tmp_path / "job.log").symlink_to(target)
    o = run_bounded(["explain", "--log", str(tmp_path / "job.log")])
    assert_one_line_refusal(o)
    assert "kernel's" in o.stderr and "not a log" in o.stderr, o.stderr


def test_stdin_from_proc_is_one_line_and_exit_2():
    with open("/proc/self/status", "rb") as f:
        o = run_bounded(["explain", "--log", "-"], stdin=f)
    assert_one_line_refusal(o)
    assert "proc file system" in o.stderr


def test_150_nested_gzip_layers(tmp_path):
    data = b"RuntimeError: Connection reset by peer\n" * 10
    for _ in range(150):
        data = gzip.compress(data, compresslevel=1)
    (tmp_path / "job.log.gz").write_bytes(data)
    o = run_bounded(["explain", "--log", str(tmp_path / "job.log.gz"), "--json"])
    assert_bounded(o)
    json.loads(o.stdout)


def test_a_gzip_inside_a_gzip_is_still_read(tmp_path):
    (tmp_path / "job.log.gz").write_bytes(gzip.compress(gzip.compress(b"x\nRuntimeError: Connection reset by peer\n")))
    o = run_bounded(["explain", "--log", str(tmp_path / "job.log.gz")])
    assert_bounded(o, codes=(0,))
    assert "line 2" in o.stdout


_FEED = """
import resource, sys
from ddpdoctor.flightrec.watchdog import Tap
n, kind = int(sys.argv[1]), sys.argv[2]
tap = Tap("log")
buf = []
for i in range(n):
    if kind == "ranks":   # a distinct rank on every line
        buf.append(f"[rank{i}]:[PG 0 (default_pg) Rank {i}] Timeout at NCCL work: 5, last enqueued NCCL work: 5, last completed NCCL work: 4.")
    else:                 # one rank, a new timed-out work on every line
        buf.append(f"[rank0]:[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={i}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)")
    if len(buf) == 10000:
        tap.feed_bytes(("\\n".join(buf) + "\\n").encode())
        buf = []
from ddpdoctor.flightrec.watchdog import judge_taps

view = judge_taps([tap])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _peak_kib(n: int, kind: str) -> int:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (GIB, GIB))
    p = subprocess.run([sys.executable, "-c", _FEED, str(n), kind], capture_output=True, text=True, timeout=120,
                       preexec_fn=limit, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stderr[-2000:]
    return int(p.stdout.split()[-1])


@pytest.mark.parametrize("kind", ["ranks", "works"])
def test_watchdog_lines_keep_memory_flat(kind):
    # 970 MB for a million lines before; now the followed (group, rank) pairs and the kept work ids
    # are bounded: four times the lines may not cost much more memory than a quarter of them
    small, large = _peak_kib(100_000, kind), _peak_kib(400_000, kind)
    assert large < small * 1.3, (small, large)


def _every_line_matches(n: int, first: int = 0) -> bytes:
    """Watchdog timeout lines, a distinct rank and work id on each: every line matches catalog signatures."""
    return "".join(
        f"[rank{i % 512}]:[E ProcessGroupNCCL.cpp:616] [Rank {i % 512}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={i}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
        f"milliseconds before timing out.\n" for i in range(first, first + n)).encode()


def test_a_log_where_every_line_matches_is_within_the_bounds(tmp_path):
    # 11 MB of nothing but matching lines through the CLI (watchdog tap included) in 10 s of CPU and 1 GiB, read
    # whole (~3 s on an idle machine). The bound is on CPU: at CI's load the wall clock also counts the scheduler's
    # time for the labs beside it (10.2 s once); the wall timeout stays as the guard against a hang.
    path = tmp_path / "job.log"
    with open(path, "wb") as f:
        for k in range(0, 60_000, 10_000):
            f.write(_every_line_matches(10_000, k))
    o = run_bounded(["explain", "--log", str(path), "--json"], timeout=30.0)
    assert_bounded(o, codes=(0, 1))
    assert o.cpu_seconds < 10.0, f"{o.cpu_seconds:.1f} s of CPU"
    assert "cut" not in json.loads(o.stdout)   # read whole: a log cut at the deadline carries "cut"
    doc = json.loads(o.stdout)
    assert "NCCL_COLLECTIVE_TIMEOUT" in json.dumps(doc)


def test_a_150_mb_log_where_every_line_matches_is_cut_at_the_deadline(tmp_path):
    # 150 MB, 660 k matching lines: more than any machine reads in 3 s (~12 us a line of scan, as much again
    # for the watchdog tap). The verdict comes within the bounds from what was read, and says it is partial.
    block = _every_line_matches(6_600)
    path = tmp_path / "job.log"
    with open(path, "wb") as f:
        for _ in range(100):
            f.write(block)
    total = path.stat().st_size
    o = run_bounded(["explain", "--log", str(path), "--json", "--deadline", "3"])
    assert_bounded(o, codes=(0, 1))
    doc = json.loads(o.stdout)
    cut = doc["cut"]
    assert cut["complete"] is False and cut["bytes_total"] == total and 0 < cut["bytes_read"] < total, cut
    assert "the rest was not read: rerun with --deadline" in cut["message"]
    assert doc["diagnoses"] and all(d["low_confidence"] for d in doc["diagnoses"]), doc["diagnoses"]
    assert doc["exit_code"] == o.returncode  # the verdict's exit code, not an error's
    # one deadline for all the logs given: the second is not read, and says why
    # (3 s: the first log is read in part even at CI's load, where 1 s went on starting up: "nothing of it")
    o = run_bounded(["explain", "--log", str(path), "--log", str(path), "--deadline", "3"])
    assert_bounded(o, codes=(0, 1))
    head = o.stdout.splitlines()[:2]
    assert "The deadline (3 s) passed" in head[1] and f"of {total / 1e6:,.0f} MB" in head[1], head
    assert "passed before this log was read" in o.stdout, o.stdout[-2000:]


def test_an_ordinary_log_is_read_whole_within_the_default_deadline(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(b"step 1 loss 0.5\n" * 50_000 + b"RuntimeError: Connection reset by peer\n")
    o = run_bounded(["explain", "--log", str(path), "--json"])
    assert_bounded(o, codes=(0, 1))
    doc = json.loads(o.stdout)
    assert "cut" not in doc and doc["lines"] == 50_001


@pytest.mark.parametrize("n", [4_000])
def test_work_per_matching_line_stops_growing(n, monkeypatch):
    # once a signature's evidence is full, more lines like it are not searched: four times the lines, about
    # the same number of searches (one more per block for the last line), where every line was searched before
    import io

    from ddpdoctor.logscan import explain_stream, linear
    calls = []
    search = linear.LinePattern.search
    monkeypatch.setattr(linear.LinePattern, "search", lambda self, text: calls.append(1) or search(self, text))

    def searches(lines: int) -> int:
        calls.clear()
        explain_stream(io.BytesIO(_every_line_matches(lines)), "job.log")
        return len(calls)
    small, large = searches(n), searches(4 * n)
    assert large < small * 1.2 and small < n, (small, large)


def test_a_first_log_the_deadline_left_unread_blames_the_start_not_logs_before_it():
    # at CI's load a 1 s deadline went on starting up: the only log given then has no "logs before it"
    from types import SimpleNamespace

    from ddpdoctor.cli.explain import _cut_note
    unread = SimpleNamespace(bytes=0, lines=0)
    _, first = _cut_note(unread, 10**8, 1.0, first=True)
    _, later = _cut_note(unread, 10**8, 1.0, first=False)
    assert "starting up took it" in first and "logs before it" not in first, first
    assert "the logs before it took it" in later, later
