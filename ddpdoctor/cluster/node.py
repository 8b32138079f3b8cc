"""One node's whole part of a `cluster` run, and on the first node the gathering (two pairing
rounds above PAIRS_ABOVE nodes)."""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ddpdoctor.cluster.launch import Launch
from ddpdoctor.cluster.node_facts import addr_mtus, key_env, local_addrs, settings, versions
from ddpdoctor.cluster.peers import ProbeListener, pair_tests, peer_set, probe_all
from ddpdoctor.cluster.store import StoreError, connect_store, gather, get_json, run_prefix, wait_keys
from ddpdoctor.cluster.store import has as store_has


@dataclass
class Options:
    port: int = 29400
    store_port: int = 29401
    deadline: float = 30.0
    probe_timeout: float = 2.0
    max_peers: int = 16
    seed: int = 0
    config_path: str | None = None
    strategy: str = "auto"   # matrix | pairs | auto (pairs above PAIRS_ABOVE nodes)

    def pairs(self, world: int) -> bool:
        return self.strategy == "pairs" or (self.strategy == "auto" and world > PAIRS_ABOVE)


PAIRS_ABOVE = 32  # up to this many nodes the full (or sampled) matrix; above it, two pairing rounds


@dataclass
class NodeRun:
    launch: Launch
    record: dict[str, Any] | None = None      # what this node published
    gathered: dict[int, dict] = field(default_factory=dict)  # on the first node: every record by index
    hellos: dict[int, dict] = field(default_factory=dict)
    error: str = ""                          # why this node could not take part


def run_node(launch: Launch, opts: Options, *, started: float, say: Callable[[str], None] = lambda s: None) -> NodeRun:
    """One node's whole part; on the first node, `gathered` holds every node's record."""
    end = started + opts.deadline
    hello_until = started + opts.deadline * 0.5
    me = launch.node
    host = socket.gethostname()
    run = NodeRun(launch)
    listener = ProbeListener(opts.port, host)
    t_listen = time.monotonic()
    try:
        from ddpdoctor.siteconfig import load
        from ddpdoctor.facts.node import PrologFacts
        cfg = load(opts.config_path)
        store = connect_store(launch, hello_until - time.monotonic())
        t_store = time.monotonic()
        hello = {"index": launch.index, "node": me, "hostname": host, "addrs": local_addrs(), "addr_mtu": addr_mtus(),
                 "port": opts.port, "port_error": listener.port_error, "eport": listener.eport,
                 "eport_range": list(listener.range)}
        store.set(f"hello/{launch.index}", json.dumps(hello))
        run.hellos[launch.index] = hello
        use_pairs = opts.pairs(launch.world)
        if use_pairs:
            from ddpdoctor.cluster import pairing
            r1 = pairing.round1(launch.world, opts.seed)
            peers = sorted({b for a, b in r1 if a == launch.index} | {a for a, b in r1 if b == launch.index})
        else:
            peers = peer_set(launch.index, launch.world, opts.max_peers, opts.seed)
        have = wait_keys(store, [f"hello/{j}" for j in peers], hello_until)
        targets = {}
        for j in peers:
            info = get_json(store, f"hello/{j}") if f"hello/{j}" in have else None
            if info:
                run.hellos[j] = info
            name = (info or {}).get("node") or (launch.names[j] if launch.names else None)
            if not name:
                continue  # torchrun: a peer that never said hello has no name to probe
            targets[j] = {"name": name, "eport": (info or {}).get("eport"), "hello": bool(info),
                          "expect": tuple(x for x in ((info or {}).get("node"), (info or {}).get("hostname")) if x)}

        # node-local checks (those of `ddpdoctor prolog`) while the probes run
        local: dict[str, Any] = {}
        ctx = PrologFacts(config=cfg, nodes=list(launch.names) or [launch.store_host])

        def run_local() -> None:
            from ddpdoctor import registry, runner
            checks = registry.select("prolog", select=cfg.select, ignore=cfg.ignore)
            res = runner.run_checks(checks, ctx, deadline=min(cfg.deadline, max(0.5, end - time.monotonic() - 1)),
                                     silenced=cfg.silenced)
            local["results"] = [r.to_dict() for r in res]

        lt = threading.Thread(target=run_local, name="cluster-local-checks", daemon=True)
        lt.start()
        t_probe = time.monotonic()
        probes = probe_all(targets, port=opts.port, me=host, timeout=opts.probe_timeout)
        pair1 = pair_tests(probes, port=opts.port, probe_timeout=opts.probe_timeout,
                           allreduce=(launch.store_host, launch.store_port, run_prefix(launch) + "round1",
                                      launch.index)) if use_pairs else {}
        t_probed = time.monotonic()
        lt.join(max(0.0, end - time.monotonic() - 1))
        record = {**hello,
                  "versions": versions(ctx.gpus), "settings": settings(ctx.raw_env, ctx.nccl_conf),
                  "env": key_env(ctx.raw_env),
                  "peers": peers, "probes": {str(j): p for j, p in probes.items()},
                  "local": local.get("results", []),
                  "timing": {"listen_s": round(t_listen - started, 3), "store_s": round(t_store - started, 3),
                             "probe_s": round(t_probed - t_probe, 3), "total_s": round(time.monotonic() - started, 3)}}
        if use_pairs:
            record["pairs1"] = pair1
        store.set(f"result/{launch.index}", json.dumps(record))
        store.add("results", 1)
        run.record = record
        if use_pairs:
            run.gathered = pairing_rounds(store, launch, opts, record, targets_of=lambda js: {
                j: {"name": (run.hellos.get(j) or {}).get("node") or (launch.names[j] if launch.names else None)
                    or _hello_name(store, j), "eport": (run.hellos.get(j) or {}).get("eport"), "hello": True,
                    "expect": ()} for j in js}, host=host, end=end)
        elif launch.index == 0:
            run.gathered = gather(store, launch.world, end - 0.5)
            run.gathered[0] = record  # this node's own record, not its copy through the store
        if launch.index == 0:
            run.gathered[0] = {**run.gathered.get(0, record), "incoming": list(listener.incoming)}
            store.set("done", "1")
        else:
            try:
                wait_keys(store, ["done"], end + 5.0, poll=0.1)
            except Exception:  # noqa: BLE001 - the first node is done and gone: so are we
                pass
    except StoreError as e:
        run.error = str(e)
        # keep answering probes until the deadline: the first node's report then shows this node runs
        time.sleep(max(0.0, end - time.monotonic()))
    except Exception as e:  # noqa: BLE001 - the store went away (the first node ended), or a bug
        if not run.error:
            run.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        listener.close()
    return run


def _hello_name(store, j: int) -> str | None:
    try:
        return (get_json(store, f"hello/{j}") or {}).get("node")
    except Exception:  # noqa: BLE001
        return None


def _pair_result(recs: Mapping[int, dict], a: int, b: int, key: str):
    from ddpdoctor.cluster.pairing import PairTest
    sa = ((recs.get(a) or {}).get(key) or {}).get(str(b))
    sb = ((recs.get(b) or {}).get(key) or {}).get(str(a))
    ok = bool(sa and sb and sa["ok"] and sb["ok"])
    return PairTest(a, b, ok, max(sa["seconds"], sb["seconds"]) if ok else 0.0, "" if ok else _why(sa, sb))


def _why(sa: dict | None, sb: dict | None) -> str:
    """What failed in a pair test, in the order the test runs: the probes (cells), the 1 MiB
    transfer, the Gloo all-reduce."""
    cells = f"{(sa or {}).get('cell', '?')}/{(sb or {}).get('cell', '?')}"
    if cells != "ok/ok":
        return cells
    for side in (sa, sb):
        bulk = (side or {}).get("bulk") or {}
        if bulk and not bulk.get("complete"):
            return f"transfer: {bulk.get('error') or 'incomplete'}"
    for side in (sa, sb):
        ar = (side or {}).get("allreduce") or {}
        if ar and not ar.get("ok"):
            return f"all-reduce: {ar.get('error') or 'failed'}"
    return cells


def pairing_rounds(store, launch: Launch, opts: Options, record: dict, *, targets_of, host: str,
                   end: float) -> dict[int, dict]:
    """Round 1 is done (every node published `pairs1`). The first node gathers it, plans round 2
    (suspects with known-good partners) and publishes it; the nodes in it test their partners and
    publish `pairs2`; the first node gathers again and judges. Returns every record (first node)."""
    from ddpdoctor.cluster import pairing
    me, world = launch.index, launch.world
    mid = time.monotonic() + (end - time.monotonic()) * 0.5
    gathered: dict[int, dict] = {}
    if me == 0:
        gathered = gather(store, world, mid)
        gathered[0] = record
        first = [_pair_result(gathered, a, b, "pairs1") for a, b in pairing.round1(world, opts.seed)]
        failed, slow, good = pairing.suspects(first)
        r2 = pairing.round2(failed, slow, good) if (failed or slow) else []
        store.set("round2", json.dumps(r2))
    else:
        wait_keys(store, ["round2"], end - 1.0, poll=0.1)
        r2 = json.loads(store.get("round2").decode()) if store_has(store, "round2") else []
    mine = sorted({b for a, b in r2 if a == me} | {a for a, b in r2 if b == me})
    involved = sorted({x for pair in r2 for x in pair})
    if mine:
        probes2 = probe_all(targets_of(mine), port=opts.port, me=host, timeout=opts.probe_timeout)
        rec2 = {"probes2": {str(j): p for j, p in probes2.items()}, "pairs2": pair_tests(probes2, port=opts.port, probe_timeout=opts.probe_timeout,
                                       allreduce=(launch.store_host, launch.store_port,
                                                  run_prefix(launch) + "round2", me))}
        store.set(f"result2/{me}", json.dumps(rec2))
        if me == 0:
            record.update(rec2)
    if me != 0:
        return {}
    deadline2 = end - 0.5
    keys = [f"result2/{j}" for j in involved if j != 0]
    wait_keys(store, keys, deadline2)
    for j in involved:
        if j != 0 and store_has(store, f"result2/{j}") and j in gathered:
            gathered[j].update(get_json(store, f"result2/{j}"))
    second = [_pair_result(gathered, a, b, "pairs2") for a, b in r2]
    v = pairing.judge(first, second)
    # round-2 probes join the matrix, so the usual checks see those cells too
    for j, rec in gathered.items():
        for k, p in (rec.get("probes2") or {}).items():
            rec.setdefault("probes", {}).setdefault(k, p)
    gathered[0]["pairing"] = {"round1": [[t.a, t.b, t.ok, t.seconds, t.detail] for t in first],
                              "round2": [[t.a, t.b, t.ok, t.seconds, t.detail] for t in second],
                              "bad": v.bad, "slow": v.slow, "cleared": v.cleared,
                              "inconclusive": v.inconclusive, "rounds": v.rounds, "tests": v.tests}
    return gathered
