"""`inspect --gather`: every node of a Slurm job inspects its own ranks; the first node judges them all.

    srun --jobid <id> --overlap -N <n> --ntasks-per-node 1 ddpdoctor inspect --gather

One task per node. Each samples the ranks on its node (ddpdoctor/inspect/sample.py) and sends its
view, one JSON line, to the step's first node, which listens on --gather-port until every node has
reported or the deadline passes, then merges the views into one InspectFacts whose ranks carry their
node, so DD510-DD515 judge the whole job and name the odd node and rank.

Why not torch's c10d TCPStore (how `ddpdoctor cluster` meets): the store needs `import torch` on every
node, 1.6-1.9 s of CPU each, where the rest of `inspect` needs 0.2 s; measured in the 16-node Slurm lab
(benchmarks/bench_inspect_gather.py) the store version took 25.8 s, this one 3.2 s. Only JSON is read
(nothing received can execute code), from messages that name this step (`job.step`), within a size
cap; the listener is closed before the verdict is printed.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from ddpdoctor.validate import BadInput

DEFAULT_PORT = 29403
MAX_VIEW = 64 << 20  # bytes one node may send (a view of 8 ranks is ~20 KiB)
CONN_TIMEOUT = 5.0


@dataclass(frozen=True)
class Step:
    index: int               # this node's position in the step (0 listens and judges)
    world: int               # nodes in the step
    node: str
    names: tuple[str, ...]   # every node by index
    first: str               # the node that listens and judges (the step's first node)
    port: int
    run_id: str              # job.step: several steps may share a port over time
    representative: bool     # False: a second task on this node; it stays silent


def detect_step(env: Mapping[str, str], *, port: int, hostname: str | None = None) -> Step:
    """Where this task sits, from srun's variables (SLURM_STEP_NODELIST is set for a step only)."""
    from ddpdoctor.launch import srun_step

    st = srun_step(env, hostname)
    if st is None:
        hint = (" (this is the batch script: run it through srun)" if env.get("SLURM_JOB_NODELIST") else "")
        raise BadInput("--gather runs once per node under srun: `srun --jobid <id> --overlap -N <n> "
                       f"--ntasks-per-node 1 ddpdoctor inspect --gather`{hint}")
    return Step(st.index, len(st.names), st.node, st.names, st.names[0], port, st.run_id,
                representative=st.representative)


class GatherError(Exception):
    """This node could not listen (first node) or reach the first node in time: one line."""


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


def _serve(step: Step, until: float, views: dict[int, dict], srv) -> None:
    """First node: accept one JSON line per node until every node reported or `until`.

    Connections are served one at a time, each for at most CONN_TIMEOUT: a peer that connects and
    stalls costs the others that long, not the whole deadline."""
    while len(views) < step.world and time.monotonic() < until:  # views[0] is the first node's own
        srv.settimeout(max(0.05, min(0.5, until - time.monotonic())))
        try:
            conn, _ = srv.accept()
        except OSError:  # TimeoutError included
            continue
        with conn:
            conn.settimeout(max(0.1, min(CONN_TIMEOUT, until - time.monotonic())))
            buf = b""
            try:
                while not buf.endswith(b"\n") and len(buf) < MAX_VIEW:
                    chunk = conn.recv(1 << 16)
                    if not chunk:
                        break
                    buf += chunk
                msg = json.loads(buf.decode())  # JSON only: nothing received can execute code
                idx = msg.get("index")
                if (msg.get("run") == step.run_id and type(idx) is int and 0 < idx < step.world
                        and isinstance(msg.get("view"), dict)):
                    views[idx] = msg["view"]
                    conn.sendall(b"ok\n")
            except (OSError, ValueError):
                continue


def listen_any(port: int) -> socket.socket:
    """The first node's listening socket on every address, IPv6 and IPv4 where the host has both."""
    if socket.has_dualstack_ipv6():
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    return socket.create_server(("", port))


def run(step: Step, collect, *, deadline: float, started: float) -> dict[int, dict] | None:
    """Sample this node; the first node returns every view that arrived by the deadline (by index),
    the others send theirs (retrying while the first node is not listening yet) and return None."""
    until = started + deadline
    if step.index == 0:
        try:
            srv = listen_any(step.port)
        except OSError as e:
            raise GatherError(f"could not listen on port {step.port}: {e.strerror or e}") from None
        views: dict[int, dict] = {}
        th = threading.Thread(target=_serve, args=(step, until - 0.3, views, srv), daemon=True)
        th.start()
        views[0] = {**node_view(step, collect), "since_start_s": round(time.monotonic() - started, 3)}
        th.join(max(0.0, until - 0.2 - time.monotonic()))
        srv.close()
        return dict(views)
    view = node_view(step, collect)
    data = json.dumps({"run": step.run_id, "index": step.index,
                       "view": {**view, "since_start_s": round(time.monotonic() - started, 3)}}).encode() + b"\n"
    last = ""
    while time.monotonic() < until:
        try:
            with socket.create_connection((step.first, step.port), timeout=max(0.1, until - time.monotonic())) as c:
                c.sendall(data)
                if c.recv(16).startswith(b"ok"):
                    return None
        except OSError as e:
            last = e.strerror or str(e)
        time.sleep(0.1)
    raise GatherError(f"could not reach the first node at {step.first}:{step.port} ({last or 'no answer'}) "
                     f"within the deadline")


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
                      "since_start_s": v.get("since_start_s")})
        if v.get("ranks"):
            jobs[v["job"]] += len(v["ranks"])
            ranks.extend(v["ranks"])
    job = jobs.most_common(1)[0][0] if jobs else ""
    interval = max((v.get("interval", 0.0) for v in views.values()), default=0.0)
    from ddpdoctor.inspect.armed import gathered_flight_recorder
    fr = gathered_flight_recorder([(step.names[j], views[j].get("fr_dumps") or []) for j in sorted(views)
                                   if j < len(step.names)])
    every = [{**j, "host": step.names[idx]} for idx in sorted(views) if idx < len(step.names)
             for j in views[idx].get("jobs") or []]
    chosen = next((v.get("chosen") for _, v in sorted(views.items()) if v.get("chosen")), "")
    return InspectFacts(f"{step.world} nodes", job, sorted(ranks, key=lambda r: r["rank"]), interval,
                        sorted(set(jobs) - {job}), {}, False, nodes=nodes, flightrec=fr, jobs=every, chosen=chosen)
