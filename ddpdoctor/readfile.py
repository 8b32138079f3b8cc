"""Read a file someone else named, within bounds: never wait on it, never read more than asked.

A path on the command line, in a dump directory or in a lint tree can be a FIFO (open() waits for a
writer for ever), a device (/dev/zero never ends), a symlink to /proc/kmsg (a read waits for the next
kernel message, or takes the messages from the system logger: each goes to one reader) or simply too
large. Each of these comes back as an OSError whose `strerror` is the one line the user sees; every
reader of a user's file goes through here.
"""
from __future__ import annotations

import errno
import os
import stat


def _fmt(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


# File systems whose "regular" files the kernel makes up as they are read (proc(5), sysfs(5), the tracing
# and cgroup file systems): their size reads 0 (or 4096) whatever they hold, a read may wait (/proc/kmsg,
# trace_pipe) or consume what another reader was owed (/proc/kmsg), and none of them is a log or a dump.
_KERNEL_FS = frozenset({"proc", "sysfs", "debugfs", "tracefs", "securityfs", "cgroup", "cgroup2", "configfs", "bpf",
                        "pstore", "efivarfs", "selinuxfs", "fusectl", "binfmt_misc", "mqueue", "nsfs"})
_KERNEL_DEVS: dict[int, str] | None = None


def _kernel_devs() -> dict[int, str]:
    """st_dev -> file system type of each kernel file system mounted here, from /proc/self/mountinfo
    (proc(5): field 3 is major:minor, the type follows ' - '); empty where there is none to read."""
    global _KERNEL_DEVS
    if _KERNEL_DEVS is None:
        devs: dict[int, str] = {}
        try:
            with open("/proc/self/mountinfo", "rb") as f:
                text = f.read(1 << 22).decode("utf-8", "replace")
        except OSError:
            text = ""
        for line in text.splitlines():
            head, sep, tail = line.partition(" - ")
            fields = head.split()
            if sep and len(fields) > 2 and tail.split()[:1] and tail.split()[0] in _KERNEL_FS:
                major, _, minor = fields[2].partition(":")
                if major.isdigit() and minor.isdigit():
                    devs[os.makedev(int(major), int(minor))] = tail.split()[0]
        _KERNEL_DEVS = devs
    return _KERNEL_DEVS


def kernel_file(st: os.stat_result) -> str | None:
    """Why a regular file is not data to read (a file of the kernel's proc, sysfs ... file system), or None."""
    fs = _kernel_devs().get(st.st_dev) if stat.S_ISREG(st.st_mode) else None
    return None if fs is None else (f"a file of the kernel's {fs} file system (made up as it is read: it can read as "
                                    "empty, wait, or take what another reader was owed), not a log or a dump")


def _open_regular(path) -> int:
    # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer, and a read of a
    # file that would wait (/proc/kmsg) fails with EAGAIN instead; O_NOCTTY: a terminal device
    # never becomes our controlling terminal. Then only a regular file is read.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        mode = st.st_mode
        why = kernel_file(st)
        if why:
            raise OSError(errno.EINVAL, why)
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a directory" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "special")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_limited(path, limit: int) -> bytes:
    """The whole of regular file `path`; OSError (one-line strerror) when it is not a regular file,
    would block, or holds more than `limit` bytes (an error, never a silent cut)."""
    fd = _open_regular(path)
    try:
        chunks, got = [], 0
        while got <= limit:
            data = os.read(fd, min(1 << 20, limit + 1 - got))
            if not data:
                break
            chunks.append(data)
            got += len(data)
        if got > limit:
            raise OSError(errno.EFBIG, f"larger than {_fmt(limit)}, the most read from such a file")
        return b"".join(chunks)
    except BlockingIOError:
        raise OSError(errno.EAGAIN, "a read would wait (a special file, not a log or dump)") from None
    finally:
        os.close(fd)


def read_prefix(path, limit: int) -> bytes:
    """The first `limit` bytes of regular file `path` (a log, where the head is enough)."""
    fd = _open_regular(path)
    try:
        return _read_upto(fd, limit)
    except BlockingIOError:
        raise OSError(errno.EAGAIN, "a read would wait (a special file, not a log or dump)") from None
    finally:
        os.close(fd)


def _read_upto(fd: int, limit: int) -> bytes:
    chunks, got = [], 0
    while got < limit:
        data = os.read(fd, min(1 << 20, limit - got))
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def open_stream(path):
    """A binary stream over regular file `path` or a pipe that has a writer (`<(zcat log.gz)`),
    for readers that stream; a FIFO nobody writes to reads as empty instead of waiting, a device
    or a special file is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode):
            os.set_blocking(fd, True)  # a writer that is there keeps writing; none: EOF at once
        elif not stat.S_ISREG(mode):
            os.close(fd)
            fd = -1
            return _open_regular(path)  # raises the one-line reason
        elif kernel_file(os.fstat(fd)):
            os.close(fd)
            fd = -1
            return _open_regular(path)  # raises the one-line reason
        # else: a regular file that would block is refused on its first read: keep O_NONBLOCK
        return os.fdopen(fd, "rb")
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise


def read_tail(path, limit: int) -> tuple[bytes, int]:
    """The last `limit` bytes of regular file `path` and the file's size (an append-only record, such as
    watch's events, whose newest part is what matters); the caller drops the first, partial line when
    size > limit."""
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            os.lseek(fd, size - limit, os.SEEK_SET)
        return _read_upto(fd, limit), size
    except BlockingIOError:
        raise OSError(errno.EAGAIN, "a read would wait (a special file, not a log or dump)") from None
    finally:
        os.close(fd)
