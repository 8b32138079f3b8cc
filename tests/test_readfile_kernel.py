"""readfile refuses the kernel's made-up files (/proc, /sys) before reading them: their size says nothing,
a read may wait or consume (/proc/kmsg), and none is a log, dump, config or source file (issue 21)."""
from __future__ import annotations

import os

import pytest

from ddpdoctor import readfile


@pytest.mark.parametrize("path", ["/proc/self/status", "/proc/kmsg", "/sys/kernel/mm/transparent_hugepage/enabled"])
def test_a_kernel_file_is_refused_by_every_reader(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not here")
    for read in (lambda: readfile.read_limited(path, 1 << 20), lambda: readfile.read_prefix(path, 1 << 20),
                 lambda: readfile.open_stream(path)):
        with pytest.raises(OSError, match="kernel's (proc|sysfs) file system"):
            read()


def test_an_ordinary_file_and_an_empty_one_are_read(tmp_path):
    (tmp_path / "a.log").write_bytes(b"x\n")
    (tmp_path / "empty.log").write_bytes(b"")
    assert readfile.read_limited(tmp_path / "a.log", 10) == b"x\n"
    assert readfile.read_limited(tmp_path / "empty.log", 10) == b""
    with readfile.open_stream(tmp_path / "empty.log") as f:
        assert f.read() == b""


def test_mountinfo_names_the_proc_mount():
    if not os.path.exists("/proc/self/mountinfo"):
        pytest.skip("no /proc here")
    assert readfile._kernel_devs().get(os.stat("/proc/self").st_dev) == "proc"
