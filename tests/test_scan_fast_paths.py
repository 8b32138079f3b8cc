"""The log scan's shortcuts for traceback-dense logs (issue 23's speed goal) answer as the long way does: the gate words
of a line read once by its bytes (spans.line_spans) against every hit of the memmem passes; split_origin's searches
run only where their literal is, against the searches run on every line; a frame's source line (`_following` of one
line) against the general loop. On every line of the logs we tune on (never the held-out split) and on made-up
overlong lines."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from ddpdoctor import catalog
from ddpdoctor.logscan import origin
from ddpdoctor.logscan.matcher import Matcher
from ddpdoctor.logscan.nextline import _following
from ddpdoctor.logscan.spans import from_hits, line_spans

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted((ROOT / "tests" / "logs").glob("*/*.log")) + sorted((ROOT / "tests" / "corpus" / "dev").glob("*.log"))
MATCHER = Matcher(catalog.failures())


def _sets(spans):
    return [(s, e, set(g)) for s, e, g in spans]


@pytest.mark.skipif(MATCHER._ac is None, reason="ahocorasick_rs missing: line_spans is from_hits of the memmem passes")
def test_the_gate_words_of_each_line_are_those_every_hit_of_the_memmem_passes_finds():
    slow = Matcher(catalog.failures(), multi=False)
    lines = 0
    for path in LOGS:
        low = path.read_bytes().lower()
        want = from_hits(slow._all_gate_hits(low))
        assert _sets(line_spans(MATCHER, low)) == want, path.name
        assert _sets(line_spans(MATCHER, low)) == want, path.name   # again, from the kept gate words
        lines += len(want)
    assert lines > 3000
    rnd = random.Random(5)
    words = [g.decode() for g in MATCHER._gate_list] + ["x" * 50, "\r", "\n", " "]
    for _ in range(200):   # lines longer than MAX_WINDOW: windows around each hit, as before
        text = "".join(rnd.choice(words) + (" " * rnd.randrange(4000) if rnd.random() < 0.1 else "")
                       for _ in range(rnd.randrange(1, 300)))
        low = text.encode().lower()
        assert _sets(line_spans(MATCHER, low)) == from_hits(slow._all_gate_hits(low))


def _split_origin_searching_every_line(text: str):
    """split_origin as it was: _NCCL_ORIGIN and _MSG_RANK searched on every line, _NOT_HOST on every label."""
    host = rank = None
    body = origin._unmarked(text)
    for _ in range(6):
        m = origin._PREFIX.match(body)
        if not m:
            break
        label = m.group("label")
        if label is not None:
            if label.isdecimal():
                rank = int(label) if rank is None else rank
            elif origin._NOT_HOST.search(label) or not any(c.isdigit() or c in "-." for c in label):
                break
            elif host is None:
                host = label
        elif m.group("mpi") is not None:
            rank = int(m.group("mpi"))
        elif m.group("rank") is not None:
            rank = int(m.group("rank"))
        elif m.group("local") is not None:
            rank = int(m.group("local")) if rank is None else rank
        elif m.group("ip") is not None and host is None:
            host = m.group("ip")
        elif m.group("torchx") is not None:
            rank = int(m.group("torchx")) if rank is None else rank
        body = body[m.end():]
    m = origin._NCCL_ORIGIN.match(body)
    if m and host is None:
        host = m.group("host")
    if rank is None:
        m = origin._MSG_RANK.search(body)
        if m:
            rank = int(next(g for g in m.groups() if g is not None))
    return body, host, rank


def test_who_wrote_a_line_reads_the_same_with_the_searches_skipped_where_their_literal_is_missing():
    found = {"host": 0, "rank": 0}
    extra = ["node1:301:301 [0] NCCL INFO comm 0x5e0 rank 1", "[PG 0 Rank 3] Watchdog", "x on rank 2 failed",
             "rank=5 done", "ranks: 4", "[Rank 1]", "RANK 7", "gpu-node-3: NCCL WARN x", "a-b: rank:9"]
    for path in LOGS:
        for raw in path.read_bytes().split(b"\n"):
            text = raw.decode("utf-8", "replace").strip("\r")[:2000]
            got = origin.split_origin(text)
            assert got == _split_origin_searching_every_line(text), text
            found["host"] += got[1] is not None
            found["rank"] += got[2] is not None
    for text in extra:
        assert origin.split_origin(text) == _split_origin_searching_every_line(text), text
    assert found["host"] > 500 and found["rank"] > 500


def _following_loop(data: bytes, end: int, n: int, width: int = 300) -> str:
    out = []
    pos = end + 1
    while len(out) < n and pos < len(data):
        nl = data.find(b"\n", pos)
        nl = len(data) if nl == -1 else nl
        out.append(data[pos:min(nl, pos + width)].decode("utf-8", "replace").strip("\r"))
        pos = nl + 1
    return "\n".join(out)


@pytest.mark.parametrize("data", [b'  File "a.py", line 1, in f\n    g()\nnext\n', b'  File "a.py", line 1, in f\n',
                                  b'  File "a.py", line 1, in f', b'  File "a.py", line 1, in f\n\n',
                                  b'  File "a.py", line 1, in f\n    g()\r\n', b'x\n' + b"y" * 299 + b"\n",
                                  b'x\n' + b"y" * 300 + b"\n", b'x\n' + b"y" * 301, b'x\n' + b"\xff\xfe" * 200 + b"\n"])
def test_the_source_line_under_a_frame_is_read_as_the_general_loop_reads_it(data):
    end = data.find(b"\n")
    end = len(data) if end == -1 else end
    for e in {end, len(data) - 1, len(data)}:
        assert _following(data, e, 1) == _following_loop(data, e, 1)
    assert _following(data, end, 2) == _following_loop(data, end, 2)


def test_the_literals_the_origin_searches_wait_for_are_in_every_match_of_them():
    # _NCCL_ORIGIN ends in `NCCL `; each branch of _MSG_RANK holds `Rank ` or `rank`
    assert origin._NCCL_ORIGIN.pattern.endswith("NCCL ") and not origin._NCCL_ORIGIN.flags & re.IGNORECASE
    branches = origin._MSG_RANK.pattern.split("|")
    assert len(branches) == 3 and not origin._MSG_RANK.flags & re.IGNORECASE
    assert all("Rank " in b or "rank" in b for b in branches)
