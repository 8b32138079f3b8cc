"""Where `ddpdoctor watch`'s resident memory goes, on a REAL torchrun + Gloo job (tests/watch_jobs/train.py).

    python3 benchmarks/bench_watch_memory.py [--seconds 60] [--debug-server] [--vs /work/main]

Starts one job and one `watch --pid` per checkout (this one, and --vs's: the same job, side by side), and at
the end of the run reads each watch process's /proc/<pid>/smaps and sums Rss by what holds it:
- `libcrypto/libssl`: OpenSSL, loaded by `import ssl` / `hashlib` (urllib.request and http.client import ssl);
- `python + other libs`: every other file-backed mapping (the interpreter, extension modules, libc...);
- `heap`: the main malloc arena ([heap]);
- `thread stacks`: the mapping each of its threads' stack pointer is in (/proc/<pid>/task/<tid>/syscall);
- `perf rings`: perf_event_open's ring buffers (anon_inode:[perf_event]; probes/ipsample.py);
- `other anonymous`: the threads' malloc arenas, CPython's object arenas, large allocations.
Also: the RSS of a bare interpreter that imports watch's modules (what the imports alone hold).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from watchlab import TrainJob, Watch  # noqa: E402

KINDS = ("libcrypto/libssl", "python + other libs", "heap", "thread stacks", "perf rings", "other anonymous")
IMPORTS = ("import ddpdoctor.cli.watch\nfrom ddpdoctor.watch import loop, observe, judge\n"
           "from ddpdoctor.render import watch\nimport re\n"
           "print(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")


def _stack_pointers(pid: int) -> list[int]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            f = open(f"/proc/{pid}/task/{tid}/syscall").read().split()
        except OSError:
            continue
        if len(f) >= 8:      # "nr a1..a6 sp pc" (proc(5)); "running" or "-1 sp pc" otherwise
            out.append(int(f[-2], 16))
        elif len(f) == 3:
            out.append(int(f[1], 16))
    return out


def breakdown(pid: int) -> dict[str, float]:
    """MiB of Rss by KINDS, from /proc/<pid>/smaps."""
    sps = _stack_pointers(pid)
    out = dict.fromkeys(KINDS, 0.0)
    cur = None
    for ln in open(f"/proc/{pid}/smaps"):
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \d+\s*(.*)$", ln)
        if head:
            lo, hi, name = int(head[1], 16), int(head[2], 16), head[3].strip()
            if "libcrypto" in name or "libssl" in name:
                cur = "libcrypto/libssl"
            elif name.startswith("/"):
                cur = "python + other libs"
            elif name == "[heap]":
                cur = "heap"
            elif name == "[stack]" or any(lo <= sp < hi for sp in sps):
                cur = "thread stacks"
            elif "perf_event" in name:
                cur = "perf rings"
            else:
                cur = "other anonymous"
            continue
        if ln.startswith("Rss:") and cur:
            out[cur] += int(ln.split()[1]) / 1024
    return out


def rss(pid: int) -> float:
    for ln in open(f"/proc/{pid}/status"):
        if ln.startswith("VmRSS:"):
            return int(ln.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--debug-server", action="store_true", help="the job runs torch's debug server")
    ap.add_argument("--vs", metavar="CHECKOUT", help="another ddpdoctor checkout, watched side by side")
    a = ap.parse_args()
    checkouts = [("this", ROOT)] + ([("vs", Path(a.vs).resolve())] if a.vs else [])
    for name, path in checkouts:
        p = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(path)}, cwd="/")
        print(f"{name} ({path}): importing watch's modules: {int(p.stdout.split()[-1]) / 1024:.1f} MiB RSS")
    env = {}
    if a.debug_server:
        from ports import free_port
        env = {"TRAIN_DEBUG_SERVER": str(free_port()), "TORCH_FR_BUFFER_SIZE": "2000"}
    with tempfile.TemporaryDirectory() as tmp:
        job = TrainJob(Path(tmp), nproc=2, seconds=a.seconds + 120, env=env)
        watches = []
        try:
            job.wait_ready()
            for name, path in checkouts:
                # -P: `-m` must not put the current directory (a checkout too) before PYTHONPATH
                w = Watch("--pid", str(job.proc.pid), "--deadline", str(a.seconds + 30),
                          argv_prefix=[sys.executable, "-P", "-m", "ddpdoctor"], env={"PYTHONPATH": str(path)})
                watches.append((name, w))
            seen = {name: [] for name, _ in checkouts}
            t0 = time.monotonic()
            while time.monotonic() - t0 < a.seconds:
                time.sleep(5)
                for name, w in watches:
                    seen[name].append(rss(w.proc.pid))
            parts = {name: breakdown(w.proc.pid) for name, w in watches}
            ends = {name: rss(w.proc.pid) for name, w in watches}
        finally:
            for _, w in watches:
                w.stop()
            job.kill()
    print(f"\nafter {a.seconds:.0f} s beside a 2-rank job{' running the debug server' if a.debug_server else ''} "
          f"(load average {os.getloadavg()[0]:.1f}); MiB of RSS:")
    print(f"{'':22s}" + "".join(f"{name:>10s}" for name, _ in checkouts))
    for k in KINDS:
        print(f"{k:22s}" + "".join(f"{parts[name][k]:10.1f}" for name, _ in checkouts))
    print(f"{'total (VmRSS)':22s}" + "".join(f"{ends[name]:10.1f}" for name, _ in checkouts))
    print(f"{'min..max over the run':22s}" + "".join(f"{min(seen[n]):5.1f}..{max(seen[n]):<4.1f}" for n, _ in checkouts))
    for name, w in watches:
        bad = [e for e in w.events if e["kind"] != "summary"]
        print(f"{name}: {len(bad)} event(s) besides the summary; stderr: {w.stderr.strip()[:300] or '(empty)'}")
    if len(checkouts) == 2:
        print(f"this / vs: {ends['this'] / ends['vs']:.2f}")


if __name__ == "__main__":
    main()
