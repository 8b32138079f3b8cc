"""`inspect --gather`: every node of a Slurm job inspects its own ranks; the first node judges them all.

    srun --jobid <id> --overlap -N <n> --ntasks-per-node 1 ddpdoctor inspect --gather

One task per node. Each samples the ranks on its node (ddpdoctor/inspect/sample.py) and publishes
them in torch's c10d TCPStore, hosted by the step's first node (the way `ddpdoctor cluster` meets,
ddpdoctor/slurm/cluster.py). The first node waits for every node until the deadline and merges the
views into one InspectFacts whose ranks carry their host, so DD510-DD515 judge the whole job and name
the odd host and rank. Only `_store` imports torch, and only in this mode.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from ddpdoctor.validate import BadInput

KEY_PREFIX = "ddpdoctor/inspect"
DEFAULT_STORE_PORT = 29403


@dataclass(frozen=True)
class Step:
    index: int               # this node's position in the step (0 hosts the store and judges)
    world: int               # nodes in the step
    node: str
    names: tuple[str, ...]   # every node by index
    store_host: str
    store_port: int
    run_id: str              # job.step: several steps may share a port over time
    representative: bool     # False: a second task on this node; it stays silent


def detect_step(env: Mapping[str, str], *, store_port: int, hostname: str | None = None) -> Step:
    """Where this task sits, from srun's variables (SLURM_STEP_NODELIST is set for a step only)."""
    from ddpdoctor.slurm import hostlist

    if not env.get("SLURM_STEP_NODELIST"):
        hint = (" (this is the batch script: run it through srun)" if env.get("SLURM_JOB_NODELIST") else "")
        raise BadInput("--gather runs once per node under srun: `srun --jobid <id> --overlap -N <n> "
                       f"--ntasks-per-node 1 ddpdoctor inspect --gather`{hint}")
    names = tuple(hostlist.expand(env["SLURM_STEP_NODELIST"]))
    node = env.get("SLURMD_NODENAME") or hostname or socket.gethostname()
    if node in names:
        index = names.index(node)
    else:
        try:
            index = int(env.get("SLURM_NODEID", ""))
        except ValueError:
            raise BadInput(f"this node ({node}) is not in the step's node list {env['SLURM_STEP_NODELIST']}") from None
    run = f"{env.get('SLURM_JOB_ID', '0')}.{env.get('SLURM_STEP_ID', '0')}"
    return Step(index, len(names), node, names, names[0], store_port, run,
                representative=env.get("SLURM_LOCALID", "0") in ("", "0"))


class StoreError(Exception):
    pass


def _store(step: Step, timeout: float):
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")  # our own one line says what failed
    from torch.distributed import PrefixStore, TCPStore

    td = datetime.timedelta(seconds=max(1.0, timeout))
    try:
        if step.index == 0:
            store = TCPStore(step.store_host, step.store_port, None, True, timeout=td, wait_for_workers=False)
        else:  # the client retries connecting until `timeout`: the first node may start later
            store = TCPStore(step.store_host, step.store_port, None, False, timeout=td)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError / DistNetworkError / DistStoreError
        what = "host" if step.index == 0 else "reach"
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StoreError(f"could not {what} the store at {step.store_host}:{step.store_port}: {first}") from None
    return PrefixStore(f"{KEY_PREFIX}/{step.run_id}/", store)


def node_view(step: Step, collect) -> dict[str, Any]:
    """This node's facts as JSON-able data; a node with no rank says why instead."""
    from ddpdoctor.inspect.sample import NoJob

    t0 = time.monotonic()
    try:
        facts = collect()
    except NoJob as e:
        return {"node": step.node, "index": step.index, "error": str(e), "took_s": round(time.monotonic() - t0, 3)}
    d = asdict(facts)
    for r in d["ranks"]:
        r["node"] = step.node
    return {"node": step.node, "index": step.index, "took_s": round(time.monotonic() - t0, 3), **d}


def wait_views(store, world: int, until: float, poll: float = 0.05) -> dict[int, dict]:
    """Every node's view by index that arrived by `until` (monotonic); polled without blocking."""
    have: dict[int, dict] = {}
    while True:
        for j in range(world):
            if j not in have and store.check([f"node/{j}"]):
                have[j] = json.loads(store.get(f"node/{j}").decode())
        if len(have) == world or time.monotonic() >= until:
            return have
        time.sleep(poll)


def run(step: Step, collect, *, deadline: float, started: float) -> dict[int, dict] | None:
    """Publish this node's view; on the first node return every node's view (None elsewhere)."""
    until = started + deadline
    # torch's import and the connection run beside this node's sample (1 s of it is a sleep): the
    # wall time per node is the longer of the two, not their sum
    box: dict[str, Any] = {}

    def connect() -> None:
        t0 = time.monotonic()
        try:
            box["store"] = _store(step, timeout=max(1.0, until - time.monotonic()))
        except StoreError as e:
            box["error"] = e
        box["store_s"] = time.monotonic() - t0

    th = threading.Thread(target=connect, name="ddpdoctor-gather-store", daemon=True)
    th.start()
    view = node_view(step, collect)
    th.join(max(0.0, until - time.monotonic()))
    if "error" in box:
        raise box["error"]
    if "store" not in box:
        raise StoreError(f"the store at {step.store_host}:{step.store_port} did not answer within the deadline")
    store = box["store"]
    view = {**view, "store_s": round(box["store_s"], 3), "since_start_s": round(time.monotonic() - started, 3)}
    store.set(f"node/{step.index}", json.dumps(view))
    if step.index != 0:
        # stay until the first node has read us: it hosts the store, a client leaving early is fine,
        # but waiting for `done` keeps every task's exit near the verdict (srun's output ends together)
        end = until
        while time.monotonic() < end and not store.check(["done"]):
            time.sleep(0.05)
        return None
    views = wait_views(store, step.world, until - 0.3)
    store.set("done", "1")
    time.sleep(0.1)  # let clients see `done` before the server goes away
    return views


def merge(step: Step, views: Mapping[int, dict]):
    """One InspectFacts for the whole step: every node's ranks, with their node; missing nodes listed."""
    from ddpdoctor.inspect.sample import InspectFacts

    nodes = []
    ranks: list[dict] = []
    jobs: Counter = Counter()
    for j, name in enumerate(step.names):
        v = views.get(j)
        if v is None:
            nodes.append({"node": name, "index": j, "reported": False})
            continue
        nodes.append({"node": name, "index": j, "reported": True, "error": v.get("error", ""),
                      "job": v.get("job", ""), "ranks": len(v.get("ranks", [])), "nvml": v.get("nvml") or {},
                      "pid_namespace_differs": v.get("pid_namespace_differs", False), "took_s": v.get("took_s"),
                      "store_s": v.get("store_s"), "since_start_s": v.get("since_start_s")})
        if v.get("ranks"):
            jobs[v["job"]] += len(v["ranks"])
            ranks.extend(v["ranks"])
    job = jobs.most_common(1)[0][0] if jobs else ""
    interval = max((v.get("interval", 0.0) for v in views.values()), default=0.0)
    return InspectFacts(f"{step.world} nodes", job, sorted(ranks, key=lambda r: r["rank"]), interval,
                        sorted(set(jobs) - {job}), {}, False, nodes=nodes)
