"""The three kinds of test (tests/conftest.py): a test is a unit test unless its file name, a fixture or
a marker says otherwise, and a unit test that starts a process or opens a socket fails, naming the marker
it needs. Proved on a scratch suite run by a real pytest with this conftest."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

SCRATCH = {
    "test_mixed.py": '''
import socket, subprocess, sys
import pytest

def test_pure():
    assert sum(range(4)) == 6

def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_binds_a_socket():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))

@pytest.mark.torchjob
def test_marked_may_start_one():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
''',
    "test_jobs_torchjob.py": '''
import subprocess, sys

def test_by_file_name():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
''',
}


def _run(tmp_path: Path, *args: str) -> str:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(HERE / "lab.py", tmp_path / "lab.py")  # the conftest's lab fixtures import it
    for name, src in SCRATCH.items():
        (tmp_path / name).write_text(src)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *args],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return r.stdout + r.stderr


def test_a_unit_test_that_starts_a_process_or_binds_a_socket_fails_and_names_the_marker(tmp_path):
    out = _run(tmp_path, "-m", "unit")
    assert "PASSED test_mixed.py::test_pure" in out
    assert "ERROR at teardown of test_starts_a_process" in out and "ERROR at teardown of test_binds_a_socket" in out
    assert "a unit test used process" in out and "a unit test used socket bind" in out
    assert "mark it @pytest.mark.torchjob, or move it to a test_*_torchjob.py file" in out
    assert "test_marked_may_start_one" not in out and "test_by_file_name" not in out  # not unit: deselected


def test_torchjob_tests_are_chosen_by_marker_and_by_file_name(tmp_path):
    out = _run(tmp_path, "-m", "torchjob")
    assert "PASSED test_mixed.py::test_marked_may_start_one" in out
    assert "PASSED test_jobs_torchjob.py::test_by_file_name" in out
    assert "2 passed, 3 deselected" in out
