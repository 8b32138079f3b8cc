"""A rule whose evidence is full is not searched again (evidence.Collector.saturated, matcher.Matcher.scan):
what the Collector holds at the end - first lines, last line, values, facts, the torchrun summary, the
exceptions of the job's code - is the same as when every line is searched, on the logs we hold and on a
long mixed log, in big blocks and in 4 KiB ones (the last line of a saturated rule is found per block)."""
from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from ddpdoctor.logscan import default_matcher
from ddpdoctor.logscan.evidence import Collector

ROOT = Path(__file__).resolve().parent.parent


def _state(data: bytes, skip: bool, chunk: int):
    col = Collector()
    for lm in default_matcher().scan(io.BytesIO(data), chunk=chunk, saturated=col.saturated if skip else frozenset()):
        col.add(lm)
    ev = lambda e: e and (e.line, e.text, e.host, e.rank, e.note)  # noqa: E731
    sigs = {k: ([ev(e) for e in st.first], ev(st.last), st.values) for k, st in col.sigs.items()}
    facts = {k: [(v.value, v.line, v.text, v.host, v.rank) for v in vs] for k, vs in col.facts.items()}
    return (sigs, facts, col.summary, col.failed, sorted(col.failures), repr(vars(col.user))), len(col.saturated)


def _mixed(n: int = 30_000) -> bytes:
    rnd = random.Random(21)
    lines = []
    for i in range(n):
        r, k = rnd.randrange(80), rnd.random()
        if k < 0.4:
            lines.append(f"[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
                         f"WorkNCCL(SeqNum={rnd.randrange(50)}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                         "ran for 600012 milliseconds before timing out.")
        elif k < 0.55:
            lines.append(f"node{rnd.randrange(90)}: RuntimeError: Connection reset by peer")
        elif k < 0.6:
            lines.append(f"[rank{r}]:[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:"
                         f"{29500 + rnd.randrange(3)} (errno: 98 - Address already in use).")
        elif k < 0.62:
            lines.append('  File "/home/me/train.py", line 88, in train_step')
        elif k < 0.64:
            lines.append(f"node{rnd.randrange(9)}:1:1 [0] NCCL INFO NCCL version 2.18.{rnd.randrange(3)}+cuda12.1")
        elif k < 0.65:
            lines.append("[rank0]: RuntimeError: Gloo connectFullMesh failed with "
                         "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error")
        else:
            lines.append(f"step {i} loss {rnd.random():.3f}")
    return ("\n".join(lines) + "\n").encode()


def _held() -> bytes:
    parts = [p.read_bytes() for p in sorted((ROOT / "tests" / "logs").glob("*/*.log"))]
    parts += [p.read_bytes() for p in sorted((ROOT / "tests" / "corpus").glob("*/*.log"))]
    return b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)


@pytest.mark.parametrize("make", [_mixed, _held])
@pytest.mark.parametrize("chunk", [4 << 20, 4096])
def test_skipping_saturated_rules_keeps_the_same_evidence(make, chunk):
    data = make()
    every, _ = _state(data, False, chunk)
    skipping, saturated = _state(data, True, chunk)
    assert saturated > 0, "no rule saturated: the skipping path went untested"
    assert skipping == every
