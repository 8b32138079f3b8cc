"""`explain` on failures this machine's own torch, CUDA and NCCL produce on a real GPU (issue 23): the catalog's
signatures were written from the emitting code's templates and from users' logs; here the installed releases print
the lines themselves, so a wording they changed fails here first. Each case is a real failure under torchrun
(NCCL_DEBUG=WARN, every rank's output in one log, as users paste it), then `ddpdoctor explain --log` on that log.

One GPU is enough: two NCCL ranks on one GPU is itself one of the failures. Skipped, with the reason, without a GPU:
    python -m pytest -q -m gpu tests/test_explain_real_gpu.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_device_gpu import _gpu_count

pytestmark = pytest.mark.skipif(_gpu_count() == 0, reason="no NVIDIA GPU here (nvidia-smi -L lists none)")

WORKER = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    case = sys.argv[1]
    local = int(os.environ["LOCAL_RANK"])
    if case == "oom":
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")          # 1 PiB: CUDA out of memory
    if case == "ordinal":
        torch.cuda.set_device(local + 1)                                # one GPU: ordinal 1 does not exist
    if case == "same_gpu":
        torch.cuda.set_device(0)                                        # every rank on GPU 0
    else:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print("all_reduce ok", t[0].item(), flush=True)
    dist.destroy_process_group()
""")


def failed_log(tmp: Path, case: str, nproc: int, env: dict | None = None) -> Path:
    script = tmp / "worker.py"
    script.write_text(WORKER)
    log = tmp / f"{case}.log"
    with open(log, "w") as out:
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                            str(script), case], stdout=out, stderr=subprocess.STDOUT, timeout=240,
                           env={**os.environ, "NCCL_DEBUG": "WARN", "PYTHONUNBUFFERED": "1", **(env or {})})
    text = log.read_text(errors="replace")
    if os.environ.get("DDPDOCTOR_GPU_LOGS"):   # keep the real logs (a corpus of what this release prints)
        Path(os.environ["DDPDOCTOR_GPU_LOGS"], log.name).write_text(text)
    print(f"--- {case}: exit {p.returncode}, {len(text.splitlines())} lines; last lines:\n" + "\n".join(text.splitlines()[-12:]))
    assert p.returncode != 0, text[-3000:]
    return log


def explain(log: Path) -> list[tuple[str, float]]:
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", "--log", str(log), "--json"],
                       capture_output=True, text=True, timeout=120)
    got = [(d["failure"], d["confidence"]) for d in json.loads(p.stdout)["diagnoses"]]
    print("explain:", got[:3])
    return got


@pytest.mark.parametrize("case,nproc,env,want,top", [
    ("same_gpu", 2, {}, "DUPLICATE_GPU_PER_RANK", 1),
    ("oom", 1, {}, "GPU_OUT_OF_MEMORY", 1),
    ("ifname", 1, {"NCCL_SOCKET_IFNAME": "nosuchif0"}, "NCCL_SOCKET_IFNAME_NOT_FOUND", 1),
    ("ordinal", 1, {}, "NPROC_EXCEEDS_GPUS", 3),   # `invalid device ordinal` is shared by three modes: a candidate
])
def test_explain_names_the_failure_this_torch_and_nccl_print(tmp_path, case, nproc, env, want, top):
    got = explain(failed_log(tmp_path, case, nproc, env))
    assert want in [g for g, _ in got[:top]], got
