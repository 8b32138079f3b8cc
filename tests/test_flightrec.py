"""explain --fr and the watchdog lines: real dumps (NCCL from an H100, Gloo from a hung torchrun job) and
variants built from their structure; the restricted unpickler against a malicious pickle; bad input."""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from ddpdoctor import flightrec
from ddpdoctor.flightrec import safe_pickle, watchdog

HERE = os.path.dirname(os.path.abspath(__file__))
NCCL = os.path.join(HERE, "flightrec", "nccl-fr-timeout")
GLOO = os.path.join(HERE, "flightrec", "gloo-barrier-mismatch")
ROOT = os.path.dirname(HERE)


def _raw(path):
    with open(path, "rb") as f:
        return safe_pickle.loads(f.read())


def _write(d, rank, obj):
    with open(os.path.join(d, f"fr_rank{rank}"), "wb") as f:
        f.write(pickle.dumps(obj))


def _gloo_job_where(tmp_path, change):
    """The real 4-rank Gloo dumps, each passed through change(rank, dump) (None drops the file)."""
    out = tmp_path / "dumps"
    out.mkdir()
    for r in range(4):
        obj = change(r, _raw(os.path.join(GLOO, f"fr_rank{r}")))
        if obj is not None:
            _write(out, r, obj)
    return str(out)


def _cli(*args, stdin=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", *args], capture_output=True, text=True,
                          env=env, timeout=60, input=stdin)


def test_nccl_dump_from_h100_is_stuck_in_allreduce_5_on_the_default_group():
    dumps, skipped = flightrec.load_dir(NCCL)
    assert [d.rank for d in dumps] == [0] and dumps[0].backend == "nccl" and skipped == []  # README/log ignored
    v = flightrec.analyze(dumps)
    g = v.first
    assert (g.pg, g.pg_desc, g.status, g.seq, g.op, g.input_sizes) == \
        ("0", "default_pg", "stuck", 5, "all_reduce", ((1048576,),))
    assert g.waiting == (0,) and not v.partial


def test_gloo_rank_calling_barrier_while_others_allreduce_is_a_mismatch_at_4():
    v = flightrec.analyze(*flightrec.load_dir(GLOO))
    g = v.first
    assert v.backend == "gloo" and (g.status, g.seq) == ("mismatch", 4)
    assert [(x.op, x.ranks) for x in g.variants] == [("all_reduce", (0, 1, 3)), ("barrier", (2,))]


def test_gloo_rank_that_skipped_the_collective_is_the_origin(tmp_path):
    def drop_seq4_on_rank2(r, d):
        if r == 2:
            d["entries"] = [e for e in d["entries"] if e["collective_seq_id"] != 4]
        else:  # the others all called all_reduce at #4
            d["entries"][-1] = copy.deepcopy(d["entries"][0]) | {"collective_seq_id": 4, "record_id": 3}
        return d
    g = flightrec.analyze(*flightrec.load_dir(_gloo_job_where(tmp_path, drop_seq4_on_rank2))).first
    assert (g.status, g.seq, g.op, g.not_entered, g.waiting) == ("diverged", 4, "all_reduce", (2,), (0, 1, 3))
    assert g.last_seq[2] == 3


def test_gloo_state_is_not_trusted_all_scheduled_is_not_a_hang():
    # every Gloo entry says "scheduled", even the three all_reduce that completed on every rank
    dumps, _ = flightrec.load_dir(GLOO)
    assert {e.state for d in dumps for e in d.entries} == {"scheduled"}
    trimmed = [dataclasses.replace(d, raw_entries=d.raw_entries[:3]) for d in dumps]
    g = flightrec.analyze(trimmed).first
    assert (g.status, g.seq) == ("consistent", 3)


def test_a_rank_without_dump_gives_a_partial_verdict_that_names_it(tmp_path):
    v = flightrec.analyze(*flightrec.load_dir(_gloo_job_where(tmp_path, lambda r, d: None if r == 3 else d)))
    assert v.missing == (3,) and v.partial and any("rank 3" in n and "partial" in n for n in v.notes)
    assert v.first.status == "mismatch"


def test_ring_buffer_that_dropped_old_entries_on_one_rank_is_no_divergence(tmp_path):
    def wrap(r, d):
        if r == 1:
            d["entries"] = d["entries"][2:]  # rank 1's buffer kept only #3 and #4
        return d
    g = flightrec.analyze(*flightrec.load_dir(_gloo_job_where(tmp_path, wrap))).first
    assert (g.status, g.seq) == ("mismatch", 4)


def test_different_sizes_at_the_same_collective_are_a_shape_mismatch(tmp_path):
    def resize(r, d):
        d["entries"][-1] = copy.deepcopy(d["entries"][0]) | {"collective_seq_id": 4}
        if r == 1:
            d["entries"][-1]["input_sizes"] = [[32]]
        return d
    g = flightrec.analyze(*flightrec.load_dir(_gloo_job_where(tmp_path, resize))).first
    assert g.status == "mismatch" and [(x.input_sizes, x.ranks) for x in g.variants] == \
        [(((16,),), (0, 2, 3)), (((32,),), (1,))]


def test_json_dump_reads_like_the_pickle(tmp_path):
    for r in range(4):
        (tmp_path / f"fr_rank{r}.json").write_text(json.dumps(_raw(os.path.join(GLOO, f"fr_rank{r}"))))
    g = flightrec.analyze(*flightrec.load_dir(str(tmp_path))).first
    assert (g.status, g.seq, g.variants[1].op) == ("mismatch", 4, "barrier")


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.torchjob
def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"version": "2.10", "entries": [_Evil(marker)]})
    with pytest.raises(safe_pickle.UnsafePickle, match="system"):
        safe_pickle.loads(evil)
    d = tmp_path / "dumps"
    d.mkdir()
    (d / "fr_rank0").write_bytes(evil)
    r = _cli("--fr", str(d))
    assert r.returncode == 2 and "refused to load" in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists()
    pickle.loads(evil)  # the same bytes with the plain unpickler do run the command: the test can fail
    assert marker.exists()


def test_any_class_instance_in_a_pickle_is_refused():
    with pytest.raises(safe_pickle.UnsafePickle):
        safe_pickle.loads(pickle.dumps({"entries": [], "when": __import__("datetime").date(2025, 1, 1)}))


@pytest.mark.parametrize("make, says", [
    (lambda d: None, "no flight-recorder dump found"),
    (lambda d: (d / "fr_rank0").write_bytes(b"hello, not a pickle"), "not a flight-recorder dump"),
    (lambda d: (d / "fr_rank0").write_bytes(open(os.path.join(GLOO, "fr_rank0"), "rb").read()[:700]),
     "truncated"),
    (lambda d: (d / "fr_rank0").write_bytes(pickle.dumps([1, 2, 3])), "no 'entries'"),
    (lambda d: [shutil.copy(os.path.join(GLOO, "fr_rank0"), d / n) for n in ("fr_rank0", "other_rank0")],
     "two dumps for rank 0"),
])
@pytest.mark.torchjob
def test_bad_dump_dirs_get_one_line_and_exit_2(tmp_path, make, says):
    d = tmp_path / "dumps"
    d.mkdir()
    make(d)
    r = _cli("--fr", str(d))
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


@pytest.mark.torchjob
def test_truncated_dump_beside_good_ones_is_a_partial_verdict(tmp_path):
    def cut(r, d):
        return d
    path = _gloo_job_where(tmp_path, cut)
    with open(os.path.join(path, "fr_rank1"), "r+b") as f:
        f.truncate(500)
    r = _cli("--fr", path)
    assert r.returncode == 0 and "fr_rank1: unreadable pickle" in r.stdout and "no dump from rank 1" in r.stdout
    assert "rank 2: barrier" in r.stdout


@pytest.mark.torchjob
def test_dumps_of_two_jobs_with_different_worlds_are_refused(tmp_path):
    def other_world(r, d):
        if r == 3:
            d["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}}
        return d
    r = _cli("--fr", _gloo_job_where(tmp_path, other_world))
    assert r.returncode == 2 and "mixed jobs" in r.stderr


@pytest.mark.torchjob
def test_explain_fr_text_and_json():
    r = _cli("--fr", GLOO)
    assert r.returncode == 0 and "ranks called different collectives at #4" in r.stdout
    j = json.loads(_cli("--fr", GLOO, "--json").stdout)["flight_recorder"]
    assert j["groups"][0]["seq"] == 4 and j["ranks"] == [0, 1, 2, 3]


# --- watchdog lines --------------------------------------------------------------------------------------------

# wordings of ProcessGroupNCCL.cpp across torch versions, as users posted them (see watchdog.py's docstring)
RANK_LOGS = {
    0: "[rank0]:[E1003 18:37:01.833 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 0] Timeout at NCCL work: "
       "6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.\n"
       "[rank0]:[E1003 18:37:01.833 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
       "timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
       "1800017 milliseconds before timing out.\n",
    1: "[rank1]:[E1003 18:37:01.833 ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank 1]  failure "
       "detected by watchdog at work sequence id: 6463 PG status: last enqueued work: 6463, last completed work: "
       "6462\n",
    2: "[rank2]:[E1003 18:37:02.001 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 2] Received a "
       "dump signal due to a collective timeout from rank 0 and we will try our best to dump the debug info. Last "
       "enqueued NCCL work: 6462, last completed NCCL work: 6462.This is most likely caused by ...\n",
    3: "[rank3]:[E1003 18:37:01.9 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 3] Exception (either an error "
       "or timeout) detected by watchdog at work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: "
       "6462.\n",
}


def test_watchdog_lines_of_the_h100_log():
    with open(os.path.join(NCCL, "job.log"), encoding="utf-8") as f:
        w = watchdog.scan(f, "job.log").groups[0]
    assert (w.pg, w.stuck_seq, w.op, w.origin, w.victims, w.sizes) == ("0", 5, "ALLREDUCE", (), (0,), {0: 1048576})
    assert w.progress[0].failed_at == 5


@pytest.mark.torchjob
def test_watchdog_names_origin_victims_and_wavefront_across_ranks_logs(tmp_path):
    paths = []
    for r, text in RANK_LOGS.items():
        p = tmp_path / f"rank{r}.log"
        p.write_text("some training output\n" * 50 + text + "torch.distributed.DistBackendError: ...\n")
        paths.append(str(p))
    r = _cli(*[a for p in paths for a in ("--log", p)])
    assert r.returncode == 0, r.stderr
    assert "never entered it (origin): rank 2; waiting (victims): 0-1,3" in r.stdout
    assert "#6462: ranks 2; #6463: ranks 0-1,3" in r.stdout
    j = json.loads(_cli("--json", *[a for p in paths for a in ("--log", p)]).stdout)
    assert len(j["logs"]) == 4 and j["watchdog"]["groups"][0]["origin"] == [2]


@pytest.mark.torchjob
def test_watchdog_lines_from_stdin_interleaved_in_one_console():
    text = "".join(RANK_LOGS[r] for r in (3, 2, 1, 0))
    r = _cli("--log", "-", stdin=text)
    assert "stuck at work #6463 ALLREDUCE; never entered it (origin): rank 2" in r.stdout


def test_subgroup_lines_are_judged_per_group_and_an_idle_group_is_not_stuck():
    lines = ["[rank4]:[E] [PG ID 2 PG GUID 3 Rank 0] Exception (either an error or timeout) detected by watchdog at "
             "work: 32, last enqueued NCCL work: 32, last completed NCCL work: 31.",
             "[rank5]:[E] [PG ID 2 PG GUID 3 Rank 1] Exception (either an error or timeout) detected by watchdog at "
             "work: 31, last enqueued NCCL work: 31, last completed NCCL work: 31.",
             "[rank4]:[E] [PG ID 0 PG GUID 0(default_pg) Rank 4] NCCL Work update periodically: last enqueued NCCL "
             "work: 9, last completed NCCL work: 9."]
    v = watchdog.scan(lines)
    g = v.groups[0]
    assert (g.pg, g.stuck_seq, g.origin, g.victims) == ("2", 32, (1,), (0,))
    assert g.progress[1].global_rank == 5
    assert [x.pg for x in v.groups] == ["2"]  # the default group finished all it enqueued: not stuck


# --- fuzz: damaged dumps never end in a traceback ---------------------------------------------------------------

def test_fuzzed_dumps_give_a_verdict_or_bad_dump_never_a_traceback(tmp_path):
    # The real Gloo dumps with seeded damage: truncation at any byte, flipped bytes, junk appended, a rank
    # dropped, a rank's file swapped for another's. explain --fr must either give a (maybe partial) verdict
    # or raise BadDump (one line, exit 2 in the CLI); any other exception would be a traceback for the user.
    import random
    from ddpdoctor.flightrec import render as fr_render
    rng = random.Random(11)
    good = {r: open(os.path.join(GLOO, f"fr_rank{r}"), "rb").read() for r in range(4)}
    outcomes = {"verdict": 0, "bad": 0}
    for i in range(120):
        d = tmp_path / f"job{i}"
        d.mkdir()
        for r, data in good.items():
            kind = rng.randrange(6)
            if kind == 0:
                data = data[:rng.randrange(len(data))]
            elif kind == 1:
                b = bytearray(data)
                for _ in range(rng.randint(1, 8)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                data = bytes(b)
            elif kind == 2:
                data = data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
            elif kind == 3 and r:
                continue  # a rank without a dump
            elif kind == 4:
                data = good[rng.randrange(4)]  # another rank's dump under this rank's name
            (d / f"fr_rank{r}").write_bytes(data)
        try:
            dumps, skipped = flightrec.load_dir(str(d))
        except flightrec.BadDump as e:
            assert str(e) and "\n" not in str(e).strip()
            outcomes["bad"] += 1
            continue
        verdict = flightrec.analyze(dumps, skipped)
        assert fr_render.divergence_text(verdict, str(d))
        fr_render.to_dict(verdict)
        outcomes["verdict"] += 1
    assert outcomes["verdict"] and outcomes["bad"], outcomes  # both paths were exercised
