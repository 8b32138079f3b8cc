"""DD4xx: GPU memory per rank, from NVML snapshots every rank of `ddpdoctor smoke` took.

The facts (ddpdoctor/facts/smoke.py: NVML snapshots the smoke worker took) are, per rank: its
host and pid, the GPU it should use (`expected`: NVML index and UUID), and NVML snapshots of its
host before init, after init and after the first collective. These checks only judge them, so
they are tested with plain data.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ddpdoctor.facts.gpu import STAGES, gpu_info as _gpu_info, job_memory_per_gpu, misplaced, nvml_available
from ddpdoctor.facts.smoke import RankRecord
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check
from ddpdoctor.units import MiB


SET_DEVICE_CODE = """\
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)            # before any other CUDA call
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
state = torch.load(path, map_location=f"cuda:{local_rank}")   # never the default cuda:0
# or, all of the above:  from ddpdoctor import setup_ddp; setup_ddp()"""


def mib(n: int | None) -> str:
    return "? MiB" if n is None else f"{n / MiB:.0f} MiB"


def who(rec: RankRecord) -> str:
    return f"rank {rec.rank} (pid {rec.pid}, {rec.host})"


def _require_nvml(ctx) -> None:
    if not ctx.records:
        raise Skip("no rank reported results")
    ok, why = nvml_available(ctx.records)
    if not ok:
        raise Skip(f"NVML unavailable: {why}")


def _host_snapshots(records: Mapping[int, RankRecord]) -> dict[str, list[dict]]:
    """Per host, every GPU snapshot any of its ranks took."""
    out: dict[str, list[dict]] = {}
    for rec in records.values():
        for stage in STAGES:
            out.setdefault(rec.host, []).extend(_gpu_info(rec).snapshots.get(stage) or [])
    return out


def foreign_processes(records: Mapping[int, RankRecord]) -> list[dict[str, Any]]:
    """Processes holding GPU memory on a job's host that are none of the job's ranks there."""
    job = {}
    for rec in records.values():
        job.setdefault(rec.host, set()).add(rec.pid)
    seen: dict[tuple, dict[str, Any]] = {}
    for host, gpus in _host_snapshots(records).items():
        for gpu in gpus:
            for p in gpu.get("processes", []):
                if p["pid"] in job.get(host, ()):
                    continue
                key = (host, gpu["uuid"], p["pid"])
                prev = seen.get(key)
                if prev is None or (p.get("used") or 0) > (prev["used"] or 0):
                    seen[key] = {"host": host, "gpu": gpu["index"], "uuid": gpu["uuid"], "pid": p["pid"],
                                 "name": p.get("name", ""), "used": p.get("used")}
    return sorted(seen.values(), key=lambda e: (e["host"], e["gpu"], e["pid"]))


@check("DD401", "every rank's GPU memory is on its own GPU", category="gpu", tags={"smoke"}, timeout=2)
def rank_memory_on_own_gpu(ctx):
    """## What it checks
    NVML lists, per GPU, the processes that hold memory there. Before init, after init and after
    the first collective, each rank's pid must appear only on the GPU its local rank selects.

    ## Why it matters
    A CUDA call before `torch.cuda.set_device(local_rank)` (a `.cuda()`, a barrier with no device
    bound, `torch.load` of a checkpoint saved from `cuda:0` without `map_location`) creates a
    context and often tensors on GPU 0 in *every* process: GPU 0 runs out of memory while the
    others have room, and the job dies with `CUDA out of memory` on rank 0 only.

    ## Fix
    Call `torch.cuda.set_device(local_rank)` first thing, pass `device_id` to
    `init_process_group`, load checkpoints with `map_location`. `from ddpdoctor import setup_ddp;
    setup_ddp()` does all of it. `ddpdoctor smoke --fix` re-runs with the fix and shows the
    difference per GPU.
    """
    _require_nvml(ctx)
    for m in misplaced(ctx.records):
        rec = ctx.records[m["rank"]]
        cause = {"before init": "the process used CUDA before ddpdoctor did anything (code run at start-up?)",
                 "after init": "init_process_group ran before torch.cuda.set_device(local_rank) and without device_id",
                 "after first collective": "the first collective ran with no device bound to the process"}[m["first_stage"]]
        if ctx.cfg.preamble and m["first_stage"] == "after init":
            cause += f", or {ctx.cfg.preamble} touched CUDA before set_device (torch.load without map_location?)"
        yield Finding(
            Severity.ERROR,
            f"{who(rec)} holds {mib(m['used'])} on GPU {m['gpu']} (its own GPU is {m['own_gpu']})",
            hint=f"first seen {m['first_stage']}: {cause}",
            fix=Fix("bind each process to its own GPU before any CUDA call",
                    commands=("ddpdoctor smoke --fix   # re-runs with the fix and prints before -> after per GPU",),
                    code=SET_DEVICE_CODE),
            evidence=m, kind="wrong-gpu")


@check("DD402", "no process outside the job holds memory on its GPUs", category="gpu", tags={"smoke"}, timeout=2)
def no_foreign_gpu_processes(ctx):
    """## What it checks
    Processes that hold memory on the job's GPUs and are none of its ranks: a previous run that
    did not exit, another user's job, a notebook.

    ## Why it matters
    Their memory is missing from the job's budget (an out-of-memory error at a batch size that
    worked yesterday), and they compete for the GPU's compute.

    ## Fix
    Stop the leftover process, or give the job other GPUs (`CUDA_VISIBLE_DEVICES`, or the
    scheduler's GPU allocation). `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`
    lists them.
    """
    _require_nvml(ctx)
    for p in foreign_processes(ctx.records):
        name = f" ({p['name']})" if p["name"] else ""
        yield Finding(
            Severity.WARNING,
            f"GPU {p['gpu']} on {p['host']} holds {mib(p['used'])} in pid {p['pid']}{name}, which is not part of this job",
            hint="inside a container NVML may report host pids: a pid that is yours under another number shows up here too",
            fix=Fix("stop it if it is a leftover, or run the job on other GPUs",
                    commands=(f"ssh {p['host']} kill {p['pid']}   # after checking what it is",
                              "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv")),
            evidence=p, kind="foreign-process")


@check("DD403", "each rank has a GPU of its own", category="gpu", tags={"smoke"}, timeout=2)
def each_rank_has_own_gpu(ctx):
    """## What it checks
    On every host that has GPUs, each rank's local rank selects a GPU that exists under its
    `CUDA_VISIBLE_DEVICES`, and no two ranks of a host select the same GPU.

    ## Why it matters
    More processes per node than visible GPUs fails with `invalid device ordinal`; two ranks on
    one GPU make NCCL fail with `Duplicate GPU detected` (or, with Gloo, share one GPU's memory).

    ## Fix
    Start as many processes per node as GPUs (`torchrun --nproc-per-node=gpu`), select the
    device with `LOCAL_RANK` (never the global `RANK`), and do not give every rank the same
    `CUDA_VISIBLE_DEVICES` entry.
    """
    _require_nvml(ctx)
    sev = Severity.ERROR if ctx.backend == "nccl" else Severity.WARNING
    by_gpu: dict[tuple, list[int]] = {}
    for r in sorted(ctx.records):
        rec = ctx.records[r]
        g = _gpu_info(rec)
        if not g.available or not g.snapshots.get("before init"):
            continue  # no GPU on this host: nothing to select
        exp = dict(g.expected)
        if exp.get("uuid") is None:
            yield Finding(sev, f"{who(rec)} has no GPU of its own: {exp.get('how') or 'no visible GPU'}",
                          hint=f"{len(g.snapshots['before init'])} GPU(s) on {rec.host}; "
                               f"{rec.local_world_size} process(es) started there",
                          fix=Fix("start one process per visible GPU",
                                  commands=("torchrun --nproc-per-node=gpu ...",)),
                          evidence={"rank": r, "local_rank": rec.local_rank, "expected": exp}, kind="no-own-gpu")
            continue
        by_gpu.setdefault((rec.host, exp["uuid"]), []).append(r)
    for (host, _uuid), ranks in sorted(by_gpu.items(), key=lambda kv: (str(kv[0][0]), kv[1])):
        if len(ranks) > 1:
            idx = _gpu_info(ctx.records[ranks[0]]).expected.get("index")
            yield Finding(sev, f"ranks {', '.join(map(str, ranks))} on {host} all select GPU {idx}",
                          hint="; ".join(f"rank {r}: {_gpu_info(ctx.records[r]).expected.get('how')}"
                                         for r in ranks),
                          fix=Fix("select the GPU with LOCAL_RANK and give each process a different one",
                                  code="torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"),
                          evidence={"host": host, "gpu": idx, "ranks": ranks}, kind="shared-gpu")


def _ranks_gpus(entries: Iterable[dict]) -> str:
    return ", ".join(f"rank {m['rank']} on GPU {m['gpu']}" for m in entries)


@check("DD404", "--fix removes the extra GPU memory", category="gpu", tags={"smoke"}, timeout=2)
def fix_removes_extra_memory(ctx):
    """## What it checks
    With `--fix`, when DD401 found ranks holding memory on another rank's GPU, the memory phases
    run again with the fix applied (`torch.cuda.set_device(local_rank)` before any CUDA call,
    `device_id` for init, `device_ids` for the barrier, `torch.cuda.empty_cache()`), and the
    per-GPU memory of the job is compared before -> after.

    ## Why it matters
    The fix is then measured on this machine, not assumed. Memory that stays on another GPU after
    the fix was put there by something the fix cannot move, like `torch.load` without
    `map_location` in your own code.

    ## Fix
    Use the same calls at the top of the training script (`from ddpdoctor import setup_ddp`); load
    checkpoints with `map_location=f"cuda:{local_rank}"`.
    """
    if not ctx.cfg.fix:
        raise Skip("run with --fix to re-run with set_device/device_id/empty_cache and compare")
    _require_nvml(ctx)
    before = misplaced(ctx.records)
    if not before:
        raise Skip("nothing to fix: every rank's memory is on its own GPU")
    if not ctx.fix_records:
        yield Finding(Severity.ERROR, "the --fix re-run produced no results",
                      hint="its ranks did not report: see the run's errors above", kind="no-results")
        return
    mem1, mem2 = job_memory_per_gpu(ctx.records), job_memory_per_gpu(ctx.fix_records)
    rows = []
    for key in sorted(set(mem1) | set(mem2), key=lambda k: (str(k[0]), k[1])):
        a, b = mem1.get(key, {"used": 0, "ranks": []}), mem2.get(key, {"used": 0, "ranks": []})
        rows.append({"host": key[0], "gpu": key[1], "before": a["used"], "after": b["used"],
                     "ranks_before": a["ranks"], "ranks_after": b["ranks"]})
    after = misplaced(ctx.fix_records)
    for row in rows:
        yield Finding(Severity.INFO,
                      f"{row['host']} GPU {row['gpu']}: {mib(row['before'])} in {len(row['ranks_before'])} process(es)"
                      f" -> {mib(row['after'])} in {len(row['ranks_after'])}", evidence=row, kind="ok")
    if after:
        yield Finding(Severity.ERROR, f"with the fix applied, memory is still on another rank's GPU: {_ranks_gpus(after)}",
                      hint="the fix binds the device before CUDA is touched; what remains was placed explicitly, "
                           "e.g. torch.load without map_location or a hard-coded cuda:0",
                      fix=Fix("load with map_location and never name cuda:0 directly", code=SET_DEVICE_CODE),
                      evidence={"after": after}, kind="still-wrong")
