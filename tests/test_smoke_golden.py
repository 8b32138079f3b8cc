"""`smoke`'s whole report pinned: rank 0's world data (records, the watchdog's verdict) as it arrives
from the worker (through JSON), the DD4xx/DD5xx/DD8xx checks and render/smoke.py's tables, compared
with tests/golden/smoke_*.{json,txt}. Written before the verdict became typed (issue 20)."""
from __future__ import annotations

import pytest

import golden
from ddpdoctor.smoke.plan import SmokeConfig
from ddpdoctor.smoke.report import build_report

OK4 = {"op": "all_reduce", "dtype": "float32", "size": 4, "src": 0, "ok": True, "ones": False, "seconds": 0.001}


def rec(rank, *, host=None, **kw):
    base = {"rank": rank, "host": host or f"node{rank // 2 + 1}", "pid": 100 + rank, "local_rank": rank % 2,
            "local_world_size": 2, "launcher": "torchrun", "device": "cpu", "has_gpu": False, "backend": "gloo",
            "versions": {"python": "3.11.7", "torch": "2.13.0", "cuda": None, "nccl": None, "driver": None},
            "settings": {"GLOO_SOCKET_IFNAME": "eth0"}, "phases": {"store": 0.01, "init": 0.12, "collectives": 0.3},
            "correctness": [OK4], "bandwidth": [], "gloo_cpu": None, "gpu": None, "error": None}
    base.update(kw)
    return base


def seen(rank, phase="all_reduce float32 4 B", index=6, *, hb=0.2, in_phase=31.0, coll=True, **kw):
    st = {"rank": rank, "host": f"node{rank // 2 + 1}", "pid": 100 + rank, "local_rank": rank % 2, "phase": phase,
          "index": index, "in_phase_s": in_phase, "heartbeat_age_s": hb, "error": None, "exit": None,
          "proc_state": None, "in_collective": coll, "seen": True}
    st.update(kw)
    return st


def unseen(rank, **kw):
    return {"rank": rank, "seen": False, "waited_s": 61.2, **kw}


def verdict(states, kind="stall", **kw):
    return {"kind": kind, "late": sorted(s["rank"] for s in states if not s.get("in_collective")),
            "after_s": 31.4, "detected_by": "rank 0's watchdog", "timeout_s": 30.0, "states": states, **kw}


def world(records, n, *, backend="gloo", v=None):
    return {"round": 1, "backend": backend, "world_size": n, "records": {str(r["rank"]): r for r in records},
            "verdict": v, "duration_s": 3.2}


def report(w, cfg=None, **kw):
    return build_report(golden.wire(w), cfg or SmokeConfig(max_size=1 << 20), launcher="standalone", env={},
                        duration_s=1.0, **kw)


def _bw(times):
    return [{"size": 1 << 16, "warmup": 2, "iters": 5, "times": times}, {"size": 1 << 20, "warmup": 2, "iters": 5,
                                                                         "times": [t * 8 for t in times]}]


def _healthy():
    return report(world([rec(r, bandwidth=_bw([0.0004, 0.0005, 0.0004, 0.0006, 0.0005])) for r in range(4)], 4))


def _stall_culprits():
    states = [seen(0), unseen(1, proc_state="stopped", pid=201, host="node1"), unseen(2, proc_state="gone", pid=202, host="node2"),
              unseen(3, proc_state="sleeping", pid=203, host="node2"), unseen(4),
              seen(5, exit="killed by SIGKILL", coll=False, hb=9.0), seen(6, exit="exited with code 1", coll=False, hb=9.0),
              seen(7, proc_state="stopped", hb=30.5, coll=False), seen(8, hb=12.0, ended_by_ddpdoctor="in phase 'x' for 36 s"),
              seen(9, coll=False, phase="init", index=5), seen(10, index=5, phase="init"),
              {**seen(11, proc_state="gone", coll=False)}, {**seen(12, hb=40.0, coll=False), "relayed": True, "relay_age_s": 3.1}]
    return report(world([rec(0)], 13, v=verdict(states)))


def _stall_transport():
    states = [seen(r, in_phase=31.0 + r) for r in range(4)]
    return report(world([rec(r) for r in range(4)], 4, v=verdict(states)))


def _terminated():
    states = [seen(0), seen(1, coll=False, phase="bandwidth 1 MiB", index=30)]
    return report(world([rec(0), rec(1)], 2, v=verdict(states, kind="terminated", signal="by SIGTERM")))


def _errors():
    err = {"phase": "init", "message": "RuntimeError: connection refused", "hint": "check the firewall"}
    states = [seen(0, error=None), seen(1, error="DistNetworkError: timed out", coll=False, phase="init", index=5),
              seen(2, coll=False), seen(3, error="boom", relayed=True, coll=False)]
    return report(world([rec(0), rec(2, error=err)], 4, v=verdict(states, kind="error")))


def _wrong_results():
    bad = [
        {**OK4, "ok": False, "dtype": "int64", "size": 4096, "first_bad": {"index": 0, "got": 4, "expected": 6}},
        {**OK4, "ok": False, "dtype": "float32", "size": 256, "first_bad": {"index": 3, "got": 8, "expected": 6}},
        {**OK4, "ok": False, "dtype": "bfloat16", "size": 4, "ones": True, "first_bad": {"index": 1, "got": 1, "expected": 3}},
        {**OK4, "ok": False, "size": 1 << 20, "first_bad": {"index": 7, "got": 6.5, "expected": 6}},
        {"op": "broadcast", "dtype": "float32", "size": 4, "src": 1, "ok": False, "first_bad": {"index": 0, "got": 0, "expected": 2}},
        {"op": "broadcast", "dtype": "int64", "size": 256, "src": 2, "ok": False, "first_bad": {"index": 2, "got": 9, "expected": 3}},
        {"op": "barrier", "ok": False, "error": "barrier returned early"},
    ]
    return report(world([rec(0, correctness=[OK4] + bad), rec(1, correctness=[OK4] + bad[:2]), rec(2)], 3))


def _bandwidth_below_expected():
    w = world([rec(r, bandwidth=_bw([0.004, 0.005, 0.004, 0.006, 0.005 + r / 1000])) for r in range(2)], 2)
    return report(w, SmokeConfig(max_size=1 << 20, expect_busbw=50.0))


def _bandwidth_above_expected_and_one_rank():
    return report(world([rec(r, bandwidth=_bw([0.0004] * 5)) for r in range(2)], 2),
                  SmokeConfig(max_size=1 << 20, expect_busbw=0.01))


def _one_rank():
    return report(world([rec(0, bandwidth=_bw([0.0004] * 5))], 1))


def _drift():
    recs = [rec(r) for r in range(4)]
    for r in (2, 3):
        recs[r]["versions"] = {**recs[r]["versions"], "torch": "2.12.1", "python": "3.11.9"}
    recs[1]["settings"] = {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_DEBUG_FILE": "/tmp/r1", "CUDA_VISIBLE_DEVICES": "1"}
    recs[3]["settings"] = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}
    return report(world(recs, 4))


def _nccl_gloo_and_gpus():
    recs = [rec(r, backend="nccl", has_gpu=r < 2, device=f"cuda:{r % 2}" if r < 2 else "cpu",
                gloo_cpu={"ok": r != 1, **({"error": "Gloo connectFullMesh failed"} if r == 1 else {})}) for r in range(3)]
    recs[2]["gloo_cpu"] = {"ok": False}
    return report(world(recs, 3, backend="nccl"), SmokeConfig(max_size=1 << 20, backend="nccl"))


def _mixed_gpus_auto():
    recs = [rec(r, has_gpu=r == 0) for r in range(2)]
    return report(world(recs, 2))


def _missing_ranks():
    return report(world([rec(0), rec(2)], 4))


def _quick_no_bandwidth():
    return report(world([rec(r) for r in range(2)], 2), SmokeConfig(max_size=1 << 20, quick=True))


SCENARIOS = {f.__name__.lstrip("_"): f for f in (
    _healthy, _stall_culprits, _stall_transport, _terminated, _errors, _wrong_results, _bandwidth_below_expected,
    _bandwidth_above_expected_and_one_rank, _one_rank, _drift, _nccl_gloo_and_gpus, _mixed_gpus_auto, _missing_ranks,
    _quick_no_bandwidth)}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_smoke_output_matches_its_golden(name):
    golden.check(f"smoke_{name}", SCENARIOS[name]())
