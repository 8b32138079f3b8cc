"""One node's whole part of a `cluster` run, and on the first node the gathering (two pairing
rounds above PAIRS_ABOVE nodes)."""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ddpdoctor.cluster.launch import Launch
from ddpdoctor.cluster.node_facts import addr_mtus, key_env, local_addrs, settings, versions
from ddpdoctor.cluster.peers import ProbeListener, Target, pair_tests, peer_set, probe_all
from ddpdoctor.cluster.store import StoreError, connect_store, gather, get_json, read_hello, run_prefix, wait_keys
from ddpdoctor.cluster.store import has as store_has
from ddpdoctor.facts.noderecord import (Hello, LocalResult, MalformedRecord, NodeRecord, PairingRounds, PairSide,
                                        round2_from_wire)


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
    record: NodeRecord | None = None      # what this node published
    gathered: dict[int, NodeRecord] = field(default_factory=dict)  # on the first node: every record by index
    hellos: dict[int, Hello] = field(default_factory=dict)
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
        hello = Hello(launch.index, me, host, tuple(local_addrs()), addr_mtus(), opts.port, listener.port_error,
                      listener.eport, tuple(listener.range))
        store.set(f"hello/{launch.index}", json.dumps(hello.to_wire()))
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
            # a hello that cannot be read counts as none: the peer is probed by the launcher's name for it
            info = read_hello(store, j) if f"hello/{j}" in have else None
            if info:
                run.hellos[j] = info
            name = (info.node if info else "") or (launch.names[j] if launch.names else None)
            if not name:
                continue  # torchrun: a peer that never said hello has no name to probe
            targets[j] = Target(name, info.eport if info else None, bool(info),
                                tuple(x for x in (info.node, info.hostname) if x) if info else ())

        # node-local checks (those of `ddpdoctor prolog`) while the probes run
        local: dict[str, tuple[LocalResult, ...]] = {}
        ctx = PrologFacts(config=cfg, nodes=list(launch.names) or [launch.store_host])

        def run_local() -> None:
            from ddpdoctor import registry, runner
            checks = registry.select("prolog", select=cfg.select, ignore=cfg.ignore)
            res = runner.run_checks(checks, ctx, deadline=min(cfg.deadline, max(0.5, end - time.monotonic() - 1)),
                                     silenced=cfg.silenced)
            local["results"] = tuple(LocalResult.from_wire(r.to_dict()) for r in res)

        lt = threading.Thread(target=run_local, name="cluster-local-checks", daemon=True)
        lt.start()
        t_probe = time.monotonic()
        probes = probe_all(targets, port=opts.port, me=host, timeout=opts.probe_timeout)
        pair1 = pair_tests(probes, port=opts.port, probe_timeout=opts.probe_timeout,
                           allreduce=(launch.store_host, launch.store_port, run_prefix(launch) + "round1",
                                      launch.index)) if use_pairs else {}
        t_probed = time.monotonic()
        lt.join(max(0.0, end - time.monotonic() - 1))
        record = NodeRecord(
            **vars(hello), versions=versions(ctx.gpus), settings=settings(ctx.raw_env, ctx.nccl_conf),
            env=key_env(ctx.raw_env), peers=tuple(peers), probes=dict(probes), local=local.get("results", ()),
            timing={"listen_s": round(t_listen - started, 3), "store_s": round(t_store - started, 3),
                    "probe_s": round(t_probed - t_probe, 3), "total_s": round(time.monotonic() - started, 3)},
            pairs1=pair1 if use_pairs else None)
        store.set(f"result/{launch.index}", json.dumps(record.to_wire()))
        store.add("results", 1)
        run.record = record
        if use_pairs:
            def targets_of(js):
                return {j: Target((run.hellos[j].node if j in run.hellos else "")
                                  or (launch.names[j] if launch.names else None) or _hello_name(store, j),
                                  run.hellos[j].eport if j in run.hellos else None, True) for j in js}
            run.gathered = pairing_rounds(store, launch, opts, record, targets_of=targets_of, host=host, end=end)
        elif launch.index == 0:
            run.gathered = gather(store, launch.world, end - 0.5)
            run.gathered[0] = record  # this node's own record, not its copy through the store
        if launch.index == 0:
            run.gathered[0] = run.gathered.get(0, record).replace(incoming=tuple(listener.incoming))
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
        h = read_hello(store, j)
    except Exception:  # noqa: BLE001 - the store went away: no name
        return None
    return h.node if h else None


def _side(recs: Mapping[int, NodeRecord], a: int, b: int, key: str) -> PairSide | None:
    """a's side of its test with b in round `key` ("pairs1" / "pairs2"), if a published one."""
    rec = recs.get(a)
    sides = getattr(rec, key) if rec is not None else None
    return (sides or {}).get(b)


def _pair_result(recs: Mapping[int, NodeRecord], a: int, b: int, key: str):
    from ddpdoctor.cluster.pairing import PairTest
    sa, sb = _side(recs, a, b, key), _side(recs, b, a, key)
    ok = bool(sa and sb and sa.ok and sb.ok)
    return PairTest(a, b, ok, max(sa.seconds, sb.seconds) if ok else 0.0, "" if ok else _why(sa, sb))


def _why(sa: PairSide | None, sb: PairSide | None) -> str:
    """What failed in a pair test, in the order the test runs: the probes (cells), the 1 MiB
    transfer, the Gloo all-reduce."""
    cells = f"{sa.cell if sa else '?'}/{sb.cell if sb else '?'}"
    if cells != "ok/ok":
        return cells
    for side in (sa, sb):
        if side.transfer_error is not None:
            return f"transfer: {side.transfer_error}"
    for side in (sa, sb):
        if side.allreduce_error is not None:
            return f"all-reduce: {side.allreduce_error}"
    return cells


def pairing_rounds(store, launch: Launch, opts: Options, record: NodeRecord, *, targets_of, host: str,
                   end: float) -> dict[int, NodeRecord]:
    """Round 1 is done (every node published `pairs1`). The first node gathers it, plans round 2
    (suspects with known-good partners) and publishes it; the nodes in it test their partners and
    publish `pairs2`; the first node gathers again and judges. Returns every record (first node)."""
    from ddpdoctor.cluster import pairing
    me, world = launch.index, launch.world
    mid = time.monotonic() + (end - time.monotonic()) * 0.5
    gathered: dict[int, NodeRecord] = {}
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
        pairs2 = pair_tests(probes2, port=opts.port, probe_timeout=opts.probe_timeout,
                            allreduce=(launch.store_host, launch.store_port, run_prefix(launch) + "round2", me))
        mine2 = record.replace(probes2=probes2, pairs2=pairs2)
        store.set(f"result2/{me}", json.dumps({k: v for k, v in mine2.to_wire().items() if k in ("probes2", "pairs2")}))
        if me == 0:
            gathered[0] = mine2
    if me != 0:
        return {}
    deadline2 = end - 0.5
    keys = [f"result2/{j}" for j in involved if j != 0]
    wait_keys(store, keys, deadline2)
    for j in involved:
        if j != 0 and store_has(store, f"result2/{j}") and j in gathered:
            try:
                probes2, pairs2 = round2_from_wire(get_json(store, f"result2/{j}"))
            except (MalformedRecord, ValueError):
                continue  # unreadable: that node's round-2 tests count as failed ("?"), not as a crash
            gathered[j] = gathered[j].replace(probes2=probes2, pairs2=pairs2)
    second = [_pair_result(gathered, a, b, "pairs2") for a, b in r2]
    v = pairing.judge(first, second)
    # round-2 probes join the matrix, so the usual checks see those cells too
    for j, rec in list(gathered.items()):
        if rec.probes2:
            gathered[j] = rec.replace(probes={**rec.probes, **{k: p for k, p in rec.probes2.items() if k not in rec.probes}})
    gathered[0] = gathered[0].replace(pairing=PairingRounds(
        tuple((t.a, t.b, t.ok, t.seconds, t.detail) for t in first),
        tuple((t.a, t.b, t.ok, t.seconds, t.detail) for t in second),
        tuple(v.bad), tuple(v.slow), tuple(v.cleared), tuple(v.inconclusive), v.rounds, v.tests))
    return gathered
