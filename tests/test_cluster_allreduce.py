"""The pair test's Gloo all-reduce (cluster/allreduce.py) on real Gloo over loopback: two ranks
agree, a rank whose peer never comes fails within its bound instead of hanging."""
from __future__ import annotations

import datetime
import threading
import time

import pytest
from ports import free_port

from ddpdoctor.cluster.allreduce import pair_allreduce, pair_prefix


def _store():
    # torch only where a test needs it: importing it at the top would cost every suite's collection 1-2 s
    pytest.importorskip("torch")
    from torch.distributed import TCPStore
    port = free_port()
    return TCPStore("127.0.0.1", port, None, True, timeout=datetime.timedelta(seconds=10),
                    wait_for_workers=False), port


@pytest.mark.torchjob
def test_both_ends_of_a_pair_all_reduce_and_check_the_sum(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    store, port = _store()
    out = {}

    def side(me, peer):
        out[me] = pair_allreduce("127.0.0.1", port, pair_prefix("t/round1", me, peer), 0 if me < peer else 1, 5.0)

    ts = [threading.Thread(target=side, args=(4, 9)), threading.Thread(target=side, args=(9, 4))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert out[4]["ok"] and out[9]["ok"], out
    assert out[4]["error"] == ""


@pytest.mark.torchjob
def test_a_peer_that_never_comes_fails_within_the_bound(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    store, port = _store()
    t0 = time.monotonic()
    r = pair_allreduce("127.0.0.1", port, pair_prefix("t/round1", 1, 2), 0, 1.0)
    assert not r["ok"] and r["error"]
    assert time.monotonic() - t0 < 2 * 1.0 + 1.5


def test_both_ends_name_the_same_key_space():
    assert pair_prefix("x/round2", 7, 3) == pair_prefix("x/round2", 3, 7) == "x/round2/allreduce/3-7/"
