"""render/smoke.py pinned: the smoke tables drawn from a finished Report, as the smoke report printed
them before the renderer moved out of smoke/report.py (the expected texts are that code's output)."""
from ddpdoctor.render import smoke as render_smoke
from ddpdoctor.render import text
from ddpdoctor.smoke.report import build_report
from ddpdoctor.smoke.plan import SmokeConfig

MiB = 1 << 20
U0, U1 = "GPU-aaaa", "GPU-bbbb"


def gpu(i, u, procs):
    return {"index": i, "uuid": u, "name": "A100", "total": 80 << 30, "used": 0,
            "processes": [{"pid": p, "used": m, "name": n} for p, m, n in procs]}


def rec(r, **kw):
    b = {"rank": r, "host": f"node{r // 2 + 1}", "pid": 100 + r, "local_rank": r % 2, "device": "cpu",
         "correctness": [{"op": "all_reduce", "dtype": "float32", "size": 4, "src": 0, "ok": True}],
         "versions": {"torch": "2.1"}, "settings": {}, "phases": {"init": 0.1, "import torch": 1.2, "correctness": 0.05},
         "bandwidth": [{"size": 1 << 20, "times": [0.001, 0.002, 0.0015]}], "error": None}
    b.update(kw)
    return b


def state(rank, **kw):
    return {"rank": rank, "host": "node1", "pid": 100 + rank, "phase": "all_reduce float32 4 B", "index": 10,
            "in_phase_s": 31.0, "heartbeat_age_s": 0.1, "error": None, "exit": None, "proc_state": None,
            "in_collective": True, "seen": True, **kw}


def verdict(states):
    return {"kind": "stall", "late": [s["rank"] for s in states], "after_s": 31.0,
            "detected_by": "rank 0's watchdog", "timeout_s": 30.0, "states": states}


def nvml(pid, own, extra=False):
    return {"nvml": {"available": True, "error": "", "driver": "550"},
            "expected": {"index": own, "uuid": [U0, U1][own], "how": f"local rank {own}"},
            "snapshots": {"after first collective": [gpu(0, U0, [(pid, 500 * MiB, "py")] if own == 0 or extra else []),
                                                     gpu(1, U1, [(pid, 400 * MiB, "py")] if own == 1 else [])]}}


GPU_FIX = dict(
    world={"records": {str(r): rec(r, device=f"cuda:{r}", has_gpu=True, gpu=nvml(100 + r, r, extra=r == 1))
                       for r in range(2)}, "world_size": 2, "backend": "nccl"},
    fix_world={"records": {str(r): rec(r, gpu=nvml(100 + r, r)) for r in range(2)}, "world_size": 2},
    cfg=SmokeConfig(fix=True))
STALLED = dict(
    world={"records": {"0": rec(0)}, "world_size": 3, "backend": "gloo",
           "verdict": verdict([state(0), state(1, heartbeat_age_s=30, proc_state="stopped", in_collective=False),
                               state(2, seen=False, relayed=True)])},
    logs={1: [f"line {i}" for i in range(12)]}, cfg=SmokeConfig(timeout=30))


def _report(w):
    return build_report(w["world"], w["cfg"], launcher="torchrun", fix_world=w.get("fix_world"), logs=w.get("logs"),
                        env={})


def test_gpu_memory_bandwidth_and_fix_line_are_pinned():
    assert render_smoke.text(_report(GPU_FIX)) == (
        '2 rank(s), backend nccl, launcher torchrun\n'
        '\n'
        'rank  host   local  device  import  init   collectives  bandwidth  busbw      correct  GPU memory\n'
        '0     node1  0      cuda:0  1.20s   0.10s  50ms         -          0.70 GB/s  1/1      GPU 0: 500 MiB\n'
        '1     node1  1      cuda:1  1.20s   0.10s  50ms         -          0.70 GB/s  1/1      GPU 0: 500 MiB (not its own), GPU 1: 400 MiB\n'
        '\n'
        'all_reduce bandwidth (nccl-tests definitions; median of 3 iterations after warm-up, slowest rank)\n'
        'size   time      algbw       busbw\n'
        '1 MiB  1.500 ms  0.699 GB/s  0.699 GB/s\n'
        '\n'
        "--fix re-run (set_device before CUDA, device_id, device_ids, empty_cache): every rank's memory on its own GPU")


def test_hung_ranks_and_output_tails_are_pinned():
    assert render_smoke.text(_report(STALLED)) == (
        '3 rank(s), backend gloo, launcher torchrun\n'
        '\n'
        'rank  host   local  device  import  init   collectives  bandwidth  busbw      correct  GPU memory\n'
        '0     node1  0      cpu     1.20s   0.10s  50ms         -          0.93 GB/s  1/1      -\n'
        '\n'
        'all_reduce bandwidth (nccl-tests definitions; median of 3 iterations after warm-up, slowest rank)\n'
        'size   time      algbw       busbw\n'
        '1 MiB  1.500 ms  0.699 GB/s  0.932 GB/s\n'
        '\n'
        "progress when rank 0's watchdog stopped the run (31.0 s; holding the others up: ranks 1)\n"
        'rank  host   pid  phase                   in phase  heartbeat age  state\n'
        '0     node1  100  all_reduce float32 4 B  31.0s     0.1s\n'
        '1     node1  101  all_reduce float32 4 B  31.0s     30.0s          stopped\n'
        '2     node1  102  not seen by rank 0 yet  -         -\n'
        '\n'
        'rank 1 output (last lines):\n'
        '  | line 4\n'
        '  | line 5\n'
        '  | line 6\n'
        '  | line 7\n'
        '  | line 8\n'
        '  | line 9\n'
        '  | line 10\n'
        '  | line 11')


def test_the_text_report_carries_the_smoke_sections_once():
    out = text.render(_report(STALLED))
    assert out.count("holding the others up: ranks 1") == 1 and "rank 1 output (last lines):" in out
