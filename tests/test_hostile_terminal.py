"""Escape sequences in what others wrote (a log, a dump's op names, a linted file, a path) never reach
the terminal raw (issue 21: `ESC c` in a log reset the reader's terminal). One function,
ddpdoctor.render.safe.terminal_text, between every renderer and the terminal."""
from __future__ import annotations

import pytest

import os
import pickle

from hostile import assert_bounded, run_bounded
from ddpdoctor.render.safe import terminal_text

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob

RESET, TITLE, CLEAR = "\x1bc", "\x1b]0;pwned\x07", "\x1b[2J"


def _clean(text: str) -> None:
    for seq in (RESET, TITLE, CLEAR, "\x07", "\x9b"):
        assert seq not in text, repr(text[:500])


def test_terminal_text_keeps_our_colours_and_escapes_everything_else():
    assert terminal_text(f"\x1b[31mred\x1b[0m {RESET}", colour=True) == "\x1b[31mred\x1b[0m \\x1bc"
    assert terminal_text(f"\x1b[31mred\x1b[0m {TITLE}", colour=False) == "\\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07"
    assert terminal_text("tab\tand\nnewline", colour=False) == "tab\tand\nnewline"


def test_a_log_with_escape_sequences(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(f"RuntimeError: Connection reset by peer {RESET}{TITLE}{CLEAR}\n"
                   f"[rank0]: Traceback {RESET}\n")
    o = run_bounded(["explain", "--log", str(log)])
    assert_bounded(o)
    _clean(o.stdout + o.stderr)


def test_op_names_of_a_dump(tmp_path):
    def entry(name):
        return {"pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1, "is_p2p": False,
                "profiling_name": name, "input_sizes": [[4]], "input_dtypes": ["Float"], "state": "scheduled"}
    for r, name in ((0, f"nccl:all_reduce{RESET}"), (1, f"nccl:broad{TITLE}cast{CLEAR}")):
        (tmp_path / f"fr_rank_{r}").write_bytes(pickle.dumps(
            {"version": "2.10", "pg_config": {"0": {"ranks": "[0, 1]"}}, "entries": [entry(name)]}))
    o = run_bounded(["explain", "--fr", str(tmp_path)])
    assert_bounded(o)
    assert "broad" in o.stdout
    _clean(o.stdout + o.stderr)


def test_a_linted_file_and_its_name(tmp_path):
    bad = tmp_path / f"t{RESET}.py"
    bad.write_text(f"import torch\ns = torch.utils.data.DataLoader(range(3), shuffle=True, sampler=[0])  # {TITLE}\n")
    (tmp_path / "syntax.py").write_text(f"def f(:\n  '{CLEAR}'\n")
    o = run_bounded(["lint", str(tmp_path)])
    assert_bounded(o)
    assert "DL006" in o.stdout
    _clean(o.stdout + o.stderr)


def test_an_error_line_with_a_hostile_path_stays_one_line(tmp_path):
    o = run_bounded(["explain", "--log", str(tmp_path / f"no\nsuch{RESET}.log")])
    assert o.returncode == 2
    assert len(o.stderr.strip().splitlines()) == 1, o.stderr
    _clean(o.stderr)
