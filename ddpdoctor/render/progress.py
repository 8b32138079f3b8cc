"""A live progress line on a terminal, for work that takes more than a second.

Written to stderr, and only when stderr is a TTY (a log file or a pipe gets nothing: the report on
stdout is the record) and TERM is not `dumb`. Nothing shows for the first `delay` seconds, so fast
runs look exactly as before; updates are throttled; the line is erased when the work ends, so the
report that follows starts on a clean line. DDPDOCTOR_NO_PROGRESS=1 turns it off.

Plain ANSI (`\\r` + erase-line) instead of rich.progress: one line of text needs no library, and
importing rich costs more than the line is worth on commands that start in tens of milliseconds
(docs/dependencies.md).
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

ERASE = "\r\x1b[2K"


def enabled(stream: TextIO | None = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    if os.environ.get("DDPDOCTOR_NO_PROGRESS") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream is not None and stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False


class Progress:
    """`with Progress() as p: p.update("scanning 40 MB of 200 MB")` — a no-op off a TTY."""

    def __init__(self, stream: TextIO | None = None, *, delay: float | None = None, every: float = 0.1):
        self.stream = stream if stream is not None else sys.stderr
        self.on = enabled(self.stream)
        if delay is None:  # DDPDOCTOR_PROGRESS_DELAY: tests show the line at once
            try:
                delay = float(os.environ.get("DDPDOCTOR_PROGRESS_DELAY", "1"))
            except ValueError:
                delay = 1.0
        self.delay, self.every = delay, every
        self.t0 = time.monotonic()
        self._last = 0.0
        self._shown = False

    def update(self, text: str) -> None:
        if not self.on:
            return
        now = time.monotonic()
        if now - self.t0 < self.delay or now - self._last < self.every:
            return
        self._last = now
        width = 0
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            pass
        line = text if not width or len(text) < width else text[:max(1, width - 2)] + "…"
        self._write(ERASE + line)
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self._write(ERASE)
            self._shown = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.on = False  # the terminal went away: the work goes on without the line

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
