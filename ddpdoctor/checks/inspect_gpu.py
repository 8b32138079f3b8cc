"""DD410: GPU memory of a running job's ranks, from NVML's pids matched to ranks (probes/ranks.py found them).

An NVML pid may be a rank's own child (a DataLoader worker that touched CUDA): it counts for that rank.
"""
from __future__ import annotations

from typing import Sequence

from ddpdoctor.checks.gpu import SET_DEVICE_CODE, misplaced, mib
from ddpdoctor.facts.inspect import InspectContext, NvmlView, RankView
from ddpdoctor.facts.smoke import GpuView, RankRecord
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check


def _by_rank_pid(ranks: Sequence[RankView], gpus) -> list[dict]:
    """NVML's GPUs with each member's memory counted under its rank's pid."""
    owner = {m: r.pid for r in ranks for m in r.members}
    out = []
    for g in gpus:
        procs: dict[int, dict] = {}
        for p in g.get("processes", ()):
            pid = owner.get(p["pid"], p["pid"])
            if pid in procs:
                procs[pid] = {**procs[pid], "used": (procs[pid].get("used") or 0) + (p.get("used") or 0)}
            else:
                procs[pid] = {**p, "pid": pid}
        out.append({**g, "processes": list(procs.values())})
    return out


def nvml_records(ranks: Sequence[RankView], snap: NvmlView) -> dict[int, RankRecord]:
    """The smoke records (facts/smoke.py) from a running job: own GPU from LOCAL_RANK + CUDA_VISIBLE_DEVICES."""
    from ddpdoctor.facts.gpu import visible_gpu
    gpus = _by_rank_pid(ranks, snap.gpus)
    out = {}
    for r in ranks:
        if r.local_rank is None:
            continue
        own = visible_gpu(r.local_rank, r.cuda_visible_devices, gpus)
        out[r.rank] = RankRecord(r.rank, r.node, r.pid, gpu=GpuView(expected=own, snapshots={"after first collective": gpus}))
    return out


@check("DD410", "every rank's GPU memory is on its own GPU (running job)", category="gpu", tags={"inspect"}, timeout=2)
def running_rank_memory_on_own_gpu(ctx: InspectContext):
    """## What it checks
    NVML's compute processes per GPU, matched to the job's ranks by pid: each rank holds memory
    only on the GPU its LOCAL_RANK selects (through CUDA_VISIBLE_DEVICES), the judgement of DD401
    applied to a job ddpdoctor did not start.

    ## Why it matters
    A CUDA call before `torch.cuda.set_device(local_rank)` leaves a context and often tensors on
    GPU 0 in every process: GPU 0 runs out of memory while the others have room.

    ## Fix
    Call `torch.cuda.set_device(local_rank)` first thing, pass `device_id` to
    `init_process_group`, load checkpoints with `map_location` (`from ddpdoctor import setup_ddp;
    setup_ddp()` does all of it).
    """
    from ddpdoctor.checks.inspect import require_ranks
    recs = require_ranks(ctx)
    if ctx.nodes:  # --gather: each node's NVML judges that node's ranks (pids are per node)
        per = [(NvmlView.from_dict(n.nvml), [r for r in recs if r.node == n.node], n.pid_namespace_differs)
               for n in ctx.nodes if NvmlView.from_dict(n.nvml).available]
        if not per:
            raise Skip("NVML unavailable on every node")
    else:
        snap = NvmlView.from_dict(ctx.nvml)
        if not snap.available:
            raise Skip(f"NVML unavailable: {snap.error or 'not read'}")
        per = [(snap, list(recs), ctx.pid_namespace_differs)]
    for snap, nrecs, ns in per:
        yield from _memory_findings(snap, nrecs, ns)


def _memory_findings(snap: NvmlView, recs: Sequence[RankView], pid_namespace_differs: bool):
    ours = {r.pid for r in recs} | {m for r in recs for m in r.members}
    seen = snap.pids()
    if pid_namespace_differs and seen and not seen & ours:
        yield Finding(Severity.WARNING,
                      "NVML reports pids of another pid namespace (a container): cannot map GPU memory to ranks here",
                      hint=f"NVML pids {sorted(seen)[:8]} match none of the job's pids {sorted(ours)[:8]}",
                      fix=Fix("run ddpdoctor inspect on the host, or in the job's container with --pid=host"),
                      evidence={"nvml_pids": sorted(seen), "rank_pids": sorted(ours)}, kind="pid-namespace")
        return
    for m in misplaced(nvml_records(recs, snap)):
        yield Finding(Severity.ERROR,
                      f"rank {m['rank']} (pid {m['pid']}) holds {mib(m['used'])} on GPU {m['gpu']}, its own GPU is {m['own_gpu']}",
                      hint="a CUDA call ran before torch.cuda.set_device(local_rank), or torch.load without map_location",
                      fix=Fix("bind each process to its own GPU before any CUDA call", code=SET_DEVICE_CODE),
                      evidence={k: m[k] for k in ("rank", "pid", "gpu", "uuid", "used", "own_gpu")}, kind="wrong-gpu")
