"""Worker -> supervisor messages: JSON lines on a pipe the supervisor passes to the worker.

Not stdout: torch, Gloo and NCCL write there, and with `--json` our stdout holds only the report.
A message type `t`: "hb" (heartbeat, see progress.heartbeat), "record" (this rank's results),
"world" (rank 0: every rank's results), "progress" (rank 0: every rank's heartbeat, relayed so
that its supervisor can still report when rank 0 itself freezes), "done", "aborted".
"""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable

FD_VAR = "DDPDOCTOR_SMOKE_FD"


class Channel:
    def __init__(self, fd: int | None):
        self.fd = fd
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> "Channel":
        fd = os.environ.get(FD_VAR)
        return cls(int(fd) if fd else None)

    def send(self, msg: dict[str, Any]) -> None:
        if self.fd is None:
            return
        data = (json.dumps(msg, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            try:
                view = memoryview(data)
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            except OSError:  # the supervisor is gone: nobody left to tell
                self.fd = None


def read_messages(fd: int, on_message: Callable[[dict], None]) -> None:
    """Read JSON lines from `fd` until EOF; a line that is not JSON is ignored."""
    buf = b""
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            chunk = f.read(65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    on_message(msg)
