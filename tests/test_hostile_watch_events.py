"""Hostile watch-events files for `explain` (logscan/watchevents.py): the armed folder is anyone's to write
to. A FIFO, /dev/zero, a link to /proc/kmsg, a 64 MiB file, JSON nested a million deep, an int of 100 000
digits, a line of 16 MiB, escape sequences and wrong types in every field: each within the bounds (10 s,
1 GiB), a verdict with a count of what was skipped, or one line and exit 2 — never a traceback."""
from __future__ import annotations

import json
import os

import pytest

from hostile import assert_bounded, assert_one_line_refusal, run_bounded

pytestmark = pytest.mark.torchjob

GOOD = (b'{"kind": "hang", "ranks": [2], "hosts": ["node3"], "where": [], "detail": "in user code", '
        b'"time": "2025-11-25T10:00:20+00:00"}\n')


def explain_events(path, *more):
    return run_bounded(["explain", "--watch-events", str(path), "--json", *more])


def test_a_fifo_is_refused_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "watch-events.jsonl")
    assert_one_line_refusal(explain_events(tmp_path / "watch-events.jsonl"))


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_one_line_and_exit_2(path):
    assert_one_line_refusal(explain_events(path))


def test_a_link_to_proc_kmsg_is_not_a_wait(tmp_path):
    (tmp_path / "watch-events.jsonl").symlink_to("/proc/kmsg")
    o = explain_events(tmp_path / "watch-events.jsonl")
    assert_bounded(o, codes=(2,))


def test_a_fifo_beside_the_dumps_does_not_stop_explain_fr(tmp_path):
    from test_explain_watch_events import gloo_dumps_where_rank2_skipped_collective_4
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    os.mkfifo(tmp_path / "watch-events.jsonl")
    o = run_bounded(["explain", "--fr", str(tmp_path)])
    assert_bounded(o, codes=(0, 2))  # not a regular file: never opened for reading, never a wait


def test_a_64_mib_file_reads_its_last_8_mib_and_says_so(tmp_path):
    f = tmp_path / "watch-events.jsonl"
    junk = b"x" * 1023 + b"\n"
    with open(f, "wb") as out:
        for _ in range(64 * 1024):
            out.write(junk)
        out.write(GOOD)
    o = explain_events(f)
    assert_bounded(o, codes=(0,))
    w = json.loads(o.stdout)["watch"]
    assert [e["ranks"] for e in w["events"]] == [[2]] and w["bytes_not_read"] == f.stat().st_size - (8 << 20)
    assert w["skipped_lines"] == 8 * 1024 - 1 and "read the last 8 MiB of 64 MiB" in w["notes"][0]


def test_deep_nesting_huge_ints_and_a_16_mib_line_are_skipped_and_counted(tmp_path):
    f = tmp_path / "watch-events.jsonl"
    f.write_bytes(b"[" * 1_000_000 + b"\n" + b'{"kind": "hang", "ranks": [' + b"9" * 100_000 + b"]}\n"
                  + b'{"kind": "hang", "detail": "' + b"a" * (16 << 20) + b'"}\n' + GOOD)
    o = explain_events(f)
    assert_bounded(o, codes=(0,))
    w = json.loads(o.stdout)["watch"]
    # the 16 MiB line is longer than the 8 MiB read: its tail is the cut first line, dropped
    assert len(w["events"]) == 1 and w["bytes_not_read"] > 0


def test_wrong_types_in_every_field_give_plain_data_or_a_skip(tmp_path):
    f = tmp_path / "watch-events.jsonl"
    bad = [{"kind": "hang", "time": "2025-11-25T10:00:20+00:00", "ranks": "0,1", "hosts": [1, None],
            "where": [{"rank": "1"}, {"rank": 1, "host": ["x"], "pid": 1e300, "where": {"line": "9", "file": 3}}],
            "detail": {"a": 1}, "waiting": [], "seq": "5", "ratio": "nan", "events": [1]},
           {"kind": "summary", "time": "not a time"}, {"kind": "hang", "time": 12},
           {"kind": "__import__('os').system('touch pwned')", "time": "2025-11-25T10:00:20+00:00"}]
    f.write_text("".join(json.dumps(b) + "\n" for b in bad) + "\xff\xfe garbage\n")
    for args in ((), ()):
        o = run_bounded(["explain", "--watch-events", str(f), *args])
        assert_bounded(o, codes=(0,))
    w = json.loads(explain_events(f).stdout)["watch"]
    (e,) = w["events"]
    assert e["ranks"] == [] and e["hosts"] == [] and e["detail"] == "" and "seq" not in e
    assert e["where"] == [{"rank": 1, "host": "?", "pid": 0, "where": {}}]
    assert w["skipped_lines"] == 4 and not (tmp_path / "pwned").exists()


def test_escape_sequences_in_an_event_never_reach_the_terminal(tmp_path):
    f = tmp_path / "watch-events.jsonl"
    e = json.loads(GOOD)
    e["detail"] = "in user code\x1b]0;owned\x07\x1b[2J\x1bc"
    e["hosts"] = ["node3\x1b[31m"]
    f.write_text(json.dumps(e) + "\n")
    o = run_bounded(["explain", "--watch-events", str(f)])
    assert_bounded(o, codes=(0,))
    assert "\x1b" not in o.stdout and "\x07" not in o.stdout and "in user code" in o.stdout
