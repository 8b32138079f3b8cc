"""Writing output that may have nowhere to go: a closed stdout, a reader that left, a file replaced
atomically. Shared by cli/ and by the prolog's side effects (slurm/prolog.py), so it lives below both.
"""
from __future__ import annotations

import os
import sys


def stdout_gone() -> None:
    """The reader of stdout went away (a closed pipe): send the rest nowhere, so that neither the
    next write nor the flush at exit fails again, and the exit code stays the verdict's."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def write_stdout(text: str) -> None:
    """Write and flush stdout; a reader that went away is not an error (see stdout_gone)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()
    except (OSError, ValueError):  # closed, or ENOSPC on a redirect: the exit code still tells
        pass


def atomic_write(path: str, text: str, mode: int = 0o644) -> str:
    """Write `text` to `path` atomically (readers never see half a file); '' or why it failed.

    ddpdoctor runs as root (the prolog) and may write into a world-writable directory: the
    temporary file is made by mkstemp in the target's directory (O_EXCL, never through a planted
    symlink), then renamed over `path` (rename replaces a symlink there, never follows it).
    """
    import tempfile
    directory = os.path.dirname(os.path.abspath(path))
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
        return ""
    except OSError as e:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return f"{path}: {e.strerror or e}"


def ensure_std_streams() -> None:
    """Started with stdout or stderr closed (`>&-`): Python sets sys.stdout to None and every write
    crashes. Put /dev/null there (it also keeps fd 1/2 from being reused by a socket we open)."""
    for fd, name, mode in ((1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is None:
            try:
                os.fstat(fd)
            except OSError:
                devnull = os.open(os.devnull, os.O_WRONLY)
                if devnull != fd:
                    os.dup2(devnull, fd)
                    os.close(devnull)
            try:
                setattr(sys, name, open(fd, mode, closefd=False, errors="replace"))
            except OSError:
                pass


class _ReaderMayLeave:
    """sys.stdout for a reader that may go away (`| head`): the first BrokenPipeError sends the rest
    to /dev/null (stdout_gone) and the command goes on to its own exit code. Raising instead lost
    the verdict: `lint` with findings, or a refused `run`, exited 0 through `| head`."""

    def __init__(self, stream):
        self._s = stream

    def write(self, text):
        try:
            return self._s.write(text)
        except BrokenPipeError:
            stdout_gone()
            return len(text)

    def flush(self):
        try:
            self._s.flush()
        except BrokenPipeError:
            stdout_gone()
            try:
                self._s.flush()  # what was buffered for the closed pipe now goes to /dev/null
            except OSError:
                pass

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._s, name)


def guard_stdout() -> None:
    """Wrap sys.stdout once in _ReaderMayLeave."""
    if sys.stdout is not None and not isinstance(sys.stdout, _ReaderMayLeave):
        sys.stdout = _ReaderMayLeave(sys.stdout)
