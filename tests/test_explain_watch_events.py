"""`explain` reads the events `watch` appended to the armed folder after the job died: each event with its
time, and whether watch agrees with the flight recorder, the NCCL watchdog lines, torchrun's first failure
and the log's top cause. The dumps and the log are the real ones (tests/flightrec/): a 4-rank Gloo job's
and an H100 NCCL timeout's; the events are what watch/loop.py writes (render/watch.py's to_json)."""
from __future__ import annotations

import copy
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from ddpdoctor import catalog, flightrec
from ddpdoctor.flightrec import safe_pickle
from ddpdoctor.logscan import watchagree, watchevents
from ddpdoctor.render.watch import to_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NCCL = os.path.join(HERE, "flightrec", "nccl-fr-timeout")
GLOO = os.path.join(HERE, "flightrec", "gloo-barrier-mismatch")
T0 = 1764064800.0  # 2025-11-25T10:00:00Z


def ev(kind, ranks, t, detail="", **extra):
    """An event as watch/judge.py makes it (wall time added by watch/loop.py)."""
    where = [{"rank": r, "host": f"node{r + 1}", "pid": 4000 + r,
              "where": {"kind": "user", "func": "step", "file": "train.py", "line": 63}} for r in ranks]
    return {"kind": kind, "ranks": ranks, "hosts": [f"node{r + 1}" for r in ranks], "where": where,
            "detail": detail, "t": t, "wall": T0 + t, **extra}


def hang(ranks, t=20.0, **extra):
    return ev("hang", ranks, t, "in user code (its main thread runs, no collective)",
              waiting={"ranks": [0, 1, 3], "call": "all_reduce", "at": "train.py:70"}, **extra)


def summary(t, end="job ended", **extra):
    return {"kind": "summary", "ranks": [0, 1, 2, 3], "hosts": ["node1"], "where": [], "detail": "", "t": t,
            "wall": T0 + t, "watched_s": t, "events": {}, "exits": {}, "open": [], "end": end, **extra}


def write_events(d, events, junk=b""):
    with open(os.path.join(d, "watch-events.jsonl"), "ab") as f:
        for e in events:
            f.write(to_json(e).encode() + b"\n")
        f.write(junk)
    return os.path.join(d, "watch-events.jsonl")


def gloo_dumps_where_rank2_skipped_collective_4(d):
    """The real 4-rank Gloo dumps; rank 2 never entered #4, the others called all_reduce there."""
    for r in range(4):
        with open(os.path.join(GLOO, f"fr_rank{r}"), "rb") as f:
            dump = safe_pickle.loads(f.read())
        if r == 2:
            dump["entries"] = [e for e in dump["entries"] if e["collective_seq_id"] != 4]
        else:
            dump["entries"][-1] = copy.deepcopy(dump["entries"][0]) | {"collective_seq_id": 4, "record_id": 3}
        with open(os.path.join(d, f"fr_rank{r}"), "wb") as f:
            f.write(pickle.dumps(dump))


def explain(*args):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": ROOT, "NO_COLOR": "1"})


def test_events_come_back_checked_with_their_time_and_bad_lines_are_counted(tmp_path):
    p = write_events(str(tmp_path), [hang([2]), summary(30.0)], b'{not json\n"a string"\n{"kind": "hang"}\n')
    we = watchevents.load(p)
    assert [e["kind"] for e in we.events] == ["hang", "summary"]
    assert we.events[0]["time"] == "2025-11-25T10:00:20+00:00" and we.events[0]["wall"] == T0 + 20
    assert we.events[0]["where"][0] == {"rank": 2, "host": "node3", "pid": 4002,
                                        "where": {"kind": "user", "func": "step", "file": "train.py", "line": 63}}
    assert we.skipped == 3 and "3 line(s) skipped" in we.notes[-1]  # no time: not evidence


def test_only_the_last_watch_of_the_file_is_the_evidence(tmp_path):
    p = write_events(str(tmp_path), [hang([1], 5.0), summary(9.0, end="deadline"), hang([2]), summary(30.0)])
    we = watchevents.load(p)
    assert [(e["kind"], e["ranks"]) for e in we.events] == [("hang", [2]), ("summary", [0, 1, 2, 3])]
    assert we.earlier == 2


def test_a_hang_that_recovered_is_not_the_origin():
    es = [watchevents.parse_line(to_json(e).encode()) for e in
          (hang([2]), ev("recovered", [0, 1, 2, 3], 25.0, "after a hang of 5 s"), summary(30.0))]
    assert watchagree.open_hang(es) is None


def test_watch_agrees_with_the_flight_recorder_on_the_rank_that_never_entered(tmp_path):
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    write_events(str(tmp_path), [hang([2]), summary(30.0, open=["hang"])])
    p = explain("--fr", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "10:00:20 hang: rank 2 on node3 (pid 4002) in user code" in p.stdout
    assert ("✓ watch agrees with the flight recorder: rank 2 never entered collective "
            "#4 all_reduce; watch named rank 2 at 10:00:20") in p.stdout, p.stdout
    j = json.loads(explain("--fr", str(tmp_path), "--json").stdout)
    (a,) = j["watch"]["agreement"]
    assert (a["verdict"], a["ranks"], a["watch_ranks"]) == ("agrees", [2], [2])
    assert j["watch"]["events"][0]["time"] == "2025-11-25T10:00:20+00:00"
    assert j["flight_recorder"]["groups"][0]["not_entered"] == [2]


def test_watch_naming_another_rank_disagrees_and_says_both(tmp_path):
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    write_events(str(tmp_path), [hang([1]), summary(30.0)])
    (a,) = json.loads(explain("--fr", str(tmp_path), "--json").stdout)["watch"]["agreement"]
    assert a["verdict"] == "disagrees" and a["ranks"] == [2] and a["watch_ranks"] == [1]


def test_a_watch_that_saw_no_hang_until_the_end_disagrees_with_a_divergence(tmp_path):
    gloo_dumps_where_rank2_skipped_collective_4(str(tmp_path))
    write_events(str(tmp_path), [summary(300.0)])
    (a,) = json.loads(explain("--fr", str(tmp_path), "--json").stdout)["watch"]["agreement"]
    assert a["verdict"] == "disagrees" and "named no open hang" in a["text"]


def test_the_armed_root_reads_the_newest_jobs_folder_and_its_events(tmp_path):
    job = tmp_path / "4711"
    job.mkdir()
    gloo_dumps_where_rank2_skipped_collective_4(str(job))
    write_events(str(job), [hang([2]), summary(30.0)])
    p = explain("--fr", str(tmp_path))
    assert "✓ watch agrees with the flight recorder" in p.stdout, p.stdout + p.stderr


def test_a_log_beside_the_events_compares_first_failure_and_top_cause(tmp_path):
    shutil.copy(os.path.join(NCCL, "job.log"), tmp_path / "job.log")
    write_events(str(tmp_path), [ev("hang", [0], 5.0, "in all_reduce, not completed"),
                                 ev("rank_gone", [0], 16.0, "killed by SIGABRT", exit_status=-6), summary(17.0)])
    j = json.loads(explain("--log", str(tmp_path / "job.log"), "--json").stdout)
    got = {a["with"]: a["verdict"] for a in j["watch"]["agreement"]}
    assert got == {"first failure": "agrees", "log's top cause": "agrees"}, j["watch"]
    text = explain("--log", str(tmp_path / "job.log")).stdout
    assert "✓ watch agrees with the first failure: torchrun's first observed failure (exitcode -6): rank 0; " \
           "watch saw rank 0 go first at 10:00:16 (killed by SIGABRT)" in text, text


def test_watch_events_alone_and_a_log_from_stdin_never_picks_up_a_stray_file(tmp_path):
    p = write_events(str(tmp_path), [hang([2]), summary(30.0)])
    out = explain("--watch-events", p)
    assert out.returncode == 0 and "watch events: 1 from" in out.stdout, out.stderr
    with open(os.path.join(NCCL, "job.log")) as f:
        piped = subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", "--log", "-", "--json"], stdin=f,
                               capture_output=True, text=True, timeout=60, cwd=tmp_path,
                               env={**os.environ, "PYTHONPATH": ROOT})
    assert "watch" not in json.loads(piped.stdout), "stdin has no folder: no events file is guessed"


def test_the_log_and_the_events_in_different_folders_need_watch_events(tmp_path):
    shutil.copy(os.path.join(NCCL, "job.log"), tmp_path / "job.log")
    ev_dir = tmp_path / "armed"
    ev_dir.mkdir()
    p = write_events(str(ev_dir), [ev("rank_gone", [1], 16.0, "killed by SIGABRT", exit_status=-6), summary(17.0)])
    assert "watch" not in json.loads(explain("--log", str(tmp_path / "job.log"), "--json").stdout)
    j = json.loads(explain("--log", str(tmp_path / "job.log"), "--watch-events", p, "--json").stdout)
    (a,) = [a for a in j["watch"]["agreement"] if a["with"] == "first failure"]
    assert a["verdict"] == "disagrees" and a["ranks"] == [0] and a["watch_ranks"] == [1]


def test_the_hang_ids_are_failure_modes_of_the_catalog():
    assert watchagree.HANG_IDS <= set(catalog.failures())


def test_a_flight_recorder_with_one_rank_stuck_compares_nothing_it_cannot():
    v = flightrec.analyze(*flightrec.load_dir(NCCL))  # every dumped rank entered #5: no origin to compare
    es = [watchevents.parse_line(to_json(e).encode()) for e in (hang([0]), summary(30.0))]
    assert watchagree.compare(es, fr=v) == []


pytestmark = pytest.mark.torchjob  # runs the CLI as a subprocess (tests/conftest.py kinds)
