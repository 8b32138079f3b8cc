"""`ddpdoctor run --watch -- torchrun ...`: launch the job, and `ddpdoctor watch` beside it.

The job cannot keep run's pid here (exec would leave nobody to start the watcher), so it runs as a
child with the same argv, environment and stdio; SIGTERM/SIGHUP sent to `run` (scancel, a closing
terminal) are passed on to it, Ctrl-C reaches it from the terminal as before, and `run` exits with
the job's own exit code. The watcher's lines go to stderr, so the job's stdout stays the job's.
"""
from __future__ import annotations

import signal
import subprocess
import sys

WATCHER_GRACE_S = 15.0  # after the job ended: time for the watcher's last events and summary


def launch_and_watch(argv: list[str], watch_args: tuple[str, ...] = ()) -> int:
    job = subprocess.Popen(argv)
    watcher = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "watch", "--pid", str(job.pid), "--wait", "600",
                                *watch_args], stdout=sys.stderr, stdin=subprocess.DEVNULL)

    def forward(signum, frame):
        try:
            job.send_signal(signum)
        except ProcessLookupError:
            pass
    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            try:
                rc = job.wait()
                break
            except KeyboardInterrupt:
                continue  # the terminal sent SIGINT to the job too: wait for it to end
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    try:
        watcher.wait(WATCHER_GRACE_S)
    except subprocess.TimeoutExpired:
        watcher.send_signal(signal.SIGINT)  # prints its summary and exits
        try:
            watcher.wait(5)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
    return rc if rc >= 0 else 128 - rc
