"""`ddpdoctor cluster`: every node probes its peers; the first node gathers and judges.

One process per node (srun -N N --ntasks-per-node=1, or torchrun with one process per node):

1. listen on the rendezvous port and on a port from this node's ephemeral range, answering the
   ddpdoctor handshake (ddpdoctor/peerprobe/protocol.py), before anything slow happens;
2. connect to torch's c10d TCPStore on the first node (the first node hosts it on --store-port; under
   torchrun the agent's store) and publish `hello/<i>`: name, addresses, ephemeral port;
3. probe a bounded set of peers (everyone for small N; else ring neighbours, the first node and a
   seeded random sample, so the cost per node stays flat): resolve the peer's name as a job would,
   connect to its rendezvous port (handshake: the node that answers names itself) and to its
   ephemeral port; meanwhile run the node-local checks (those `ddpdoctor prolog` runs);
4. publish `result/<i>`; keep listening until the first node says `done` (peers still probe us).

The first node waits for every result until the deadline, names the nodes that never reported,
and builds a ClusterView that the DD71x checks judge (ddpdoctor/checks/slurm.py). Only
`connect_store` imports torch.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import random
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ddpdoctor import __version__
from ddpdoctor.peerprobe.protocol import hello as hello_probe
from ddpdoctor.probes import dns, sockets
from ddpdoctor.validate import BadInput

KEY_PREFIX = "ddpdoctor/cluster"
ENV_PREFIXES = ("NCCL_", "GLOO_")


# ----------------------------------------------------------------------------- launch

@dataclass(frozen=True)
class Launch:
    mode: str                 # "srun" or "torchrun"
    index: int                # this node's position (0 = the first node, which gathers)
    world: int                # number of nodes
    node: str                 # this node's name as the job names it (Slurm node name, else hostname)
    names: tuple[str, ...]    # every node's name by index when the launcher says (srun); else ()
    store_host: str
    store_port: int
    host_store: bool          # this process creates the TCPStore (else a client)
    run_id: str               # keys are prefixed with it: several runs may share a store
    representative: bool = True  # False: another task on this node speaks for it (exit at once)


def detect_launch(env: Mapping[str, str], *, store_port: int, hostname: str | None = None) -> Launch:
    """Where this process sits in the run, from srun's or torchrun's variables."""
    from ddpdoctor.slurm import hostlist

    host = hostname or socket.gethostname()
    if env.get("SLURM_STEP_NODELIST"):  # set by srun for a step; a batch script has only SLURM_JOB_NODELIST
        names = tuple(hostlist.expand(env["SLURM_STEP_NODELIST"]))
        node = env.get("SLURMD_NODENAME") or host
        if node in names:
            index = names.index(node)
        else:
            try:
                index = int(env.get("SLURM_NODEID", ""))
            except ValueError:
                raise BadInput(f"this node ({node}) is not in the step's node list {env.get('SLURM_STEP_NODELIST')}") from None
        local = env.get("SLURM_LOCALID", "0")
        job = env.get("SLURM_JOB_ID", "0")
        step = env.get("SLURM_STEP_ID", "0")
        return Launch("srun", index, len(names), node, names, names[0], store_port, index == 0,
                      f"{job}.{step}", representative=local in ("", "0"))
    if "TORCHELASTIC_RUN_ID" in env or ("GROUP_RANK" in env and "MASTER_ADDR" in env):
        try:
            group = int(env.get("GROUP_RANK", "0"))
            local = int(env.get("LOCAL_RANK", "0"))
            world = int(env.get("GROUP_WORLD_SIZE") or 0) or int(env["WORLD_SIZE"]) // max(1, int(env.get("LOCAL_WORLD_SIZE", "1")))
            master = env["MASTER_ADDR"]
            mport = int(env["MASTER_PORT"])
        except (KeyError, ValueError) as e:
            raise BadInput(f"torchrun's variables are incomplete or malformed ({e}); run one process per node") from None
        agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        run = f"{env.get('TORCHELASTIC_RUN_ID', 'run')}.{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        return Launch("torchrun", group, world, host, (), master, mport, group == 0 and not agent_store,
                      run, representative=local == 0)
    if env.get("SLURM_JOB_NODELIST"):
        raise BadInput("this is the job script, not a step on every node: run "
                       "`srun --ntasks-per-node=1 ddpdoctor cluster` inside it")
    raise BadInput("run it on every node at once: `srun -N <nodes> --ntasks-per-node=1 ddpdoctor cluster`, "
                   "or under torchrun with --nproc-per-node=1")


def peer_set(i: int, n: int, max_peers: int, seed: int = 0) -> list[int]:
    """The nodes node i probes: all others when few; else ring neighbours, node 0 and a random sample.

    Every node is probed by its ring neighbours and node 0 by everyone (it is the rendezvous host),
    so a dead or cut-off node is always seen, and each node's work is bounded by `max_peers`.
    """
    others = [j for j in range(n) if j != i]
    if len(others) <= max_peers:
        return others
    chosen: list[int] = []

    def add(j: int) -> None:
        if j != i and j not in chosen and len(chosen) < max_peers:
            chosen.append(j)

    add(0)
    reach = max(1, max_peers // 4)
    for d in range(1, reach + 1):
        add((i + d) % n)
        add((i - d) % n)
    rng = random.Random(seed * 1_000_003 + i)
    pool = [j for j in others if j not in chosen]
    rng.shuffle(pool)
    for j in pool:
        add(j)
    return sorted(chosen)


# ----------------------------------------------------------------------------- listener

def ProbeListener(port: int, me: str, *, port_range: tuple[int, int] | None = None):
    """The handshake server of `network --listen`, kept running in the background for as long as
    peers may probe; a port already taken is recorded in `port_error` instead of failing."""
    from ddpdoctor.peerprobe.server import ProbeServer

    return ProbeServer(port, me, port_range=port_range, require_port=False)


# ----------------------------------------------------------------------------- probes

def probe_peer(name: str, *, port: int, eport: int | None, expect: Sequence[str], me: str,
               timeout: float) -> dict[str, Any]:
    """Resolve `name` as a job would and connect to its rendezvous and ephemeral ports.

    `expect` holds the names the peer answers to (its node name and hostname): a handshake answered
    by another host means the name resolves to the wrong machine.
    """
    r = dns.resolve(name, timeout=timeout)
    out: dict[str, Any] = {"name": name, "addrs": list(r.addrs), "resolve_error": r.error,
                           "resolve_ms": round(r.duration_s * 1000, 1), "resolve_timed_out": r.timed_out}
    addr = (r.ipv4 or r.addrs or (None,))[0]
    if r.ipv4 and len(r.ipv4) != len(r.addrs):
        # A and AAAA: probe the address torch's c10d would try first (see dns.c10d_order, DD210)
        addr = (dns.c10d_order(name, timeout=timeout).addrs or (addr,))[0]
    out["addr"] = addr
    if addr is None:
        return out
    t = sockets.tcp_probe(addr, port, timeout=timeout)
    rdzv: dict[str, Any] = {"state": t.state, "ms": round(t.latency_s * 1000, 1), "error": t.error}
    if t.state == sockets.OPEN:
        h = hello_probe(addr, port, me, timeout=timeout)
        rdzv["ddpdoctor"] = h.is_ddpdoctor
        rdzv["answered_by"] = h.peer_host if h.is_ddpdoctor else ""
        if h.is_ddpdoctor and expect and h.peer_host not in expect and h.peer_host != "?":
            rdzv["state"] = "wrong-host"
    out["rdzv"] = rdzv
    if eport:
        from ddpdoctor.peerprobe.protocol import ephemeral
        e = ephemeral(addr, eport, me, timeout=timeout)
        out["eph"] = {"state": e.state, "ms": round(e.latency_s * 1000, 1), "error": e.error, "port": eport}
    return out


def probe_all(targets: Mapping[int, dict[str, Any]], *, port: int, me: str, timeout: float) -> dict[int, dict[str, Any]]:
    """Probe every target at once (a thread each, bounded by the probe timeout)."""
    results: dict[int, dict[str, Any]] = {}
    lock = threading.Lock()

    def one(j: int, info: dict[str, Any]) -> None:
        try:
            res = probe_peer(info["name"], port=port, eport=info.get("eport"), expect=info.get("expect", ()),
                             me=me, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - a probe bug must not lose the others
            res = {"name": info["name"], "error": f"{type(e).__name__}: {e}"}
        if not info.get("hello"):
            res["no_hello"] = True
        with lock:
            results[j] = res

    threads = [threading.Thread(target=one, args=(j, info), daemon=True) for j, info in targets.items()]
    for t in threads:
        t.start()
    end = time.monotonic() + 4 * timeout + 1.0  # resolve + connect + handshake + ephemeral, each bounded
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    with lock:
        return dict(results)


# ----------------------------------------------------------------------------- facts of this node

def versions(gpus=None) -> dict[str, str]:
    """torch, NCCL, CUDA, NVIDIA driver, Python, ddpdoctor: what must agree across nodes."""
    v = {"python": platform.python_version(), "ddpdoctor": __version__}
    try:
        import torch
        v["torch"] = torch.__version__
        v["cuda"] = torch.version.cuda or "none"
        try:
            nccl = torch.cuda.nccl.version()
            v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:  # noqa: BLE001 - a CPU build has no NCCL
            v["nccl"] = "none"
    except ImportError:
        v["torch"] = "not installed"
    if gpus is not None:
        v["driver"] = gpus.driver if gpus.available else "none"
    return v


def settings(env: Mapping[str, str], nccl_conf: Mapping[str, str]) -> dict[str, str]:
    """NCCL_*/GLOO_* as the job would see them (the environment wins over /etc/nccl.conf)."""
    out = {k: f"{v} (nccl.conf)" for k, v in nccl_conf.items()}
    out.update({k: v for k, v in env.items() if k.startswith(ENV_PREFIXES)})
    return dict(sorted(out.items()))


KEY_ENV_PREFIXES = ("TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TORCH_GLOO_", "CUDA_")
KEY_ENV = ("LD_LIBRARY_PATH", "LD_PRELOAD", "OMP_NUM_THREADS", "PYTHONPATH")


def key_env(env: Mapping[str, str]) -> dict[str, str]:
    """Variables beyond NCCL_/GLOO_ that change what a rank loads or does (the fingerprint, DD720)."""
    return dict(sorted((k, v) for k, v in env.items() if k.startswith(KEY_ENV_PREFIXES) or k in KEY_ENV))


def local_addrs() -> list[str]:
    from ddpdoctor.probes.nics import list_nics
    return sorted({a for n in list_nics() if not n.is_loopback for a in n.ipv4 + n.ipv6})


def addr_mtus() -> dict[str, int]:
    """address -> MTU of the interface carrying it (DD719 compares the MTUs nodes reach each other on)."""
    from ddpdoctor.probes.nics import list_nics
    return {a: n.mtu for n in list_nics() if not n.is_loopback for a in n.ipv4 + n.ipv6}


# ----------------------------------------------------------------------------- the store

class StoreError(Exception):
    pass


def connect_store(launch: Launch, timeout: float):
    """The c10d TCPStore every node publishes in (torch imported here, and only here)."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # no C++ warnings for our polling
    from torch.distributed import PrefixStore, TCPStore

    td = datetime.timedelta(seconds=max(1.0, timeout))
    try:
        if launch.host_store:
            store = TCPStore(launch.store_host, launch.store_port, None, True, timeout=td, wait_for_workers=False)
        else:
            store = TCPStore(launch.store_host, launch.store_port, None, False, timeout=td)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError / DistNetworkError / DistStoreError
        what = "host" if launch.host_store else "reach"
        raise StoreError(f"could not {what} the store at {launch.store_host}:{launch.store_port}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return PrefixStore(f"{KEY_PREFIX}/{launch.run_id}/", store)


def _has(store, key: str) -> bool:
    return bool(store.check([key]))


def _get_json(store, key: str) -> Any:
    return json.loads(store.get(key).decode())


def wait_keys(store, keys: Sequence[str], until: float, poll: float = 0.05) -> set[str]:
    """The keys present by `until` (monotonic), polled without blocking (no C++ timeout warnings)."""
    have: set[str] = set()
    while True:
        for k in keys:
            if k not in have and _has(store, k):
                have.add(k)
        if len(have) == len(keys) or time.monotonic() >= until:
            return have
        time.sleep(poll)


# ----------------------------------------------------------------------------- one node's run

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
        from ddpdoctor.slurm.config import load
        from ddpdoctor.slurm.facts import PrologFacts
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
            from ddpdoctor.slurm import pairing
            r1 = pairing.round1(launch.world, opts.seed)
            peers = sorted({b for a, b in r1 if a == launch.index} | {a for a, b in r1 if b == launch.index})
        else:
            peers = peer_set(launch.index, launch.world, opts.max_peers, opts.seed)
        have = wait_keys(store, [f"hello/{j}" for j in peers], hello_until)
        targets = {}
        for j in peers:
            info = _get_json(store, f"hello/{j}") if f"hello/{j}" in have else None
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
            res = runner.run_checks(checks, ctx, deadline=min(cfg.deadline, max(0.5, end - time.monotonic() - 1)))
            local["results"] = [r.to_dict() for r in res]

        lt = threading.Thread(target=run_local, name="cluster-local-checks", daemon=True)
        lt.start()
        t_probe = time.monotonic()
        probes = probe_all(targets, port=opts.port, me=host, timeout=opts.probe_timeout)
        pair1 = pair_tests(probes, opts) if use_pairs else {}
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
            if launch.index == 0:
                run.gathered[0] = {**run.gathered.get(0, record), "incoming": list(listener.incoming)}
                store.set("done", "1")
            else:
                try:
                    wait_keys(store, ["done"], end + 5.0, poll=0.1)
                except Exception:  # noqa: BLE001
                    pass
        elif launch.index == 0:
            run.gathered = gather(store, launch.world, end - 0.5)
            run.gathered[0] = {**record, "incoming": list(listener.incoming)}
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
        return (_get_json(store, f"hello/{j}") or {}).get("node")
    except Exception:  # noqa: BLE001
        return None


def pair_tests(probes: Mapping[int, dict], opts: Options) -> dict[str, dict]:
    """This node's side of each pair test: both ports answered, then 1 MiB each way through the
    peer's listener (probes/pathmtu.bulk) within the probe timeout: ok and seconds, per peer."""
    from ddpdoctor.probes import pathmtu
    out: dict[str, dict] = {}
    lock = threading.Lock()

    def one(j: int, p: dict) -> None:
        res = {"ok": False, "seconds": 0.0, "cell": cell(p)}
        if res["cell"] == OK and p.get("addr"):
            b = pathmtu.bulk(p["addr"], opts.port, socket.gethostname(), deadline_s=opts.probe_timeout,
                             connect_timeout=opts.probe_timeout)
            res.update(ok=b.complete, seconds=round(b.up_s + b.down_s, 4),
                       bulk={"sent_ok": b.sent_ok, "back_ok": b.back_ok, "error": b.error})
        with lock:
            out[str(j)] = res

    threads = [threading.Thread(target=one, args=(j, p), daemon=True) for j, p in probes.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3 * opts.probe_timeout + 2)
    return out


def _pair_result(recs: Mapping[int, dict], a: int, b: int, key: str):
    from ddpdoctor.slurm.pairing import PairTest
    sa = ((recs.get(a) or {}).get(key) or {}).get(str(b))
    sb = ((recs.get(b) or {}).get(key) or {}).get(str(a))
    ok = bool(sa and sb and sa["ok"] and sb["ok"])
    return PairTest(a, b, ok, max(sa["seconds"], sb["seconds"]) if ok else 0.0,
                    "" if ok else f"{(sa or {}).get('cell', '?')}/{(sb or {}).get('cell', '?')}")


def pairing_rounds(store, launch: Launch, opts: Options, record: dict, *, targets_of, host: str,
                   end: float) -> dict[int, dict]:
    """Round 1 is done (every node published `pairs1`). The first node gathers it, plans round 2
    (suspects with known-good partners) and publishes it; the nodes in it test their partners and
    publish `pairs2`; the first node gathers again and judges. Returns every record (first node)."""
    from ddpdoctor.slurm import pairing
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
        r2 = json.loads(store.get("round2").decode()) if _has(store, "round2") else []
    mine = sorted({b for a, b in r2 if a == me} | {a for a, b in r2 if b == me})
    involved = sorted({x for pair in r2 for x in pair})
    if mine:
        probes2 = probe_all(targets_of(mine), port=opts.port, me=host, timeout=opts.probe_timeout)
        rec2 = {"probes2": {str(j): p for j, p in probes2.items()}, "pairs2": pair_tests(probes2, opts)}
        store.set(f"result2/{me}", json.dumps(rec2))
        if me == 0:
            record.update(rec2)
    if me != 0:
        return {}
    deadline2 = end - 0.5
    keys = [f"result2/{j}" for j in involved if j != 0]
    wait_keys(store, keys, deadline2)
    for j in involved:
        if j != 0 and _has(store, f"result2/{j}") and j in gathered:
            gathered[j].update(_get_json(store, f"result2/{j}"))
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


def gather(store, world: int, until: float) -> dict[int, dict]:
    """Every node's record by index, waiting until `until`; missing nodes are absent."""
    while time.monotonic() < until:
        try:
            if int(store.add("results", 0)) >= world:
                break
        except Exception:  # noqa: BLE001
            break
        time.sleep(0.05)
    out: dict[int, dict] = {}
    for j in range(world):
        key = f"result/{j}"
        if _has(store, key):
            out[j] = _get_json(store, key)
        elif _has(store, f"hello/{j}"):
            out[j] = {**_get_json(store, f"hello/{j}"), "unfinished": True}
    return out


# ----------------------------------------------------------------------------- the view

OK, NOT_PROBED, NO_NAME, WRONG_HOST, RDZV_FAIL, EPH_FAIL, BOTH_FAIL, UNKNOWN = "ok", "·", "N", "W", "R", "E", "X", "?"
CELL_TEXT = {OK: "✓", NOT_PROBED: "·", NO_NAME: "N", WRONG_HOST: "W", RDZV_FAIL: "R", EPH_FAIL: "E",
             BOTH_FAIL: "✗", UNKNOWN: "?"}
LEGEND = ("✓ both ports answer   R rendezvous port fails   E ephemeral port fails   ✗ both fail   "
          "N name does not resolve   W another host answers   · not probed   ? node never reported")
MATRIX_MAX = 64


def cell(probe: Mapping[str, Any] | None) -> str:
    if probe is None:
        return NOT_PROBED
    if not probe.get("addr"):
        return NO_NAME
    rd = (probe.get("rdzv") or {}).get("state")
    if rd == "wrong-host":
        return WRONG_HOST
    eph = probe.get("eph")
    rd_ok = rd == sockets.OPEN
    eph_ok = eph is None or eph.get("state") == sockets.OPEN
    if rd_ok and eph_ok:
        return OK
    if not rd_ok and (eph is None or not eph_ok):
        return BOTH_FAIL
    return RDZV_FAIL if not rd_ok else EPH_FAIL


@dataclass
class Pair:
    src: int
    dst: int
    kind: str            # NO_NAME, WRONG_HOST, RDZV_FAIL, EPH_FAIL, BOTH_FAIL
    probe: dict[str, Any]


class ClusterView:
    """Every node's record, judged by the DD71x checks; built on the first node (or from JSON in tests)."""

    def __init__(self, records: Mapping[int, dict], world: int, *, names: Sequence[str] = (), port: int = 29400,
                 store: str = "", elapsed_s: float = 0.0, reference: Mapping[str, str] | None = None):
        self.reference = dict(reference) if reference else None  # DD720: a fingerprint file, else the majority
        self.records = {int(k): v for k, v in records.items()}
        self.world = world
        self.port = port
        self.store = store
        self.elapsed_s = elapsed_s
        probed = {int(j): p.get("name") for r in self.records.values() for j, p in (r.get("probes") or {}).items()}
        self.names = [(self.records.get(i) or {}).get("node") or (names[i] if i < len(names) else None)
                      or probed.get(i) or f"rank{i}" for i in range(world)]
        self.hostname = (self.records.get(0) or {}).get("hostname", self.names[0] if self.names else "?")

    # -- who took part
    @property
    def missing(self) -> list[int]:
        return [i for i in range(self.world) if i not in self.records or self.records[i].get("unfinished")]

    def finished(self, i: int) -> bool:
        return i in self.records and not self.records[i].get("unfinished")

    def probe(self, src: int, dst: int) -> dict[str, Any] | None:
        if not self.finished(src):
            return None
        return (self.records[src].get("probes") or {}).get(str(dst))

    def cell(self, src: int, dst: int) -> str:
        if src == dst:
            return "-"
        if not self.finished(src):
            return UNKNOWN
        return cell(self.probe(src, dst))

    def pairs(self) -> list[Pair]:
        out = []
        for i in range(self.world):
            for j in range(self.world):
                if i != j:
                    c = self.cell(i, j)
                    if c not in (OK, NOT_PROBED, UNKNOWN, "-"):
                        out.append(Pair(i, j, c, self.probe(i, j) or {}))
        return out

    def seen_by(self, j: int) -> list[int]:
        """Reporting nodes whose probe reached node j's rendezvous port (ddpdoctor answered)."""
        return [i for i in range(self.world) if i != j and (self.probe(i, j) or {}).get("rdzv", {}).get("ddpdoctor")]

    # -- names
    def resolutions(self) -> dict[int, dict[str, list[int]]]:
        """For each target node: first address -> the nodes that resolved its name to it."""
        out: dict[int, dict[str, list[int]]] = {}
        for i in range(self.world):
            if not self.finished(i):
                continue
            for j_s, p in (self.records[i].get("probes") or {}).items():
                if p.get("addr"):
                    out.setdefault(int(j_s), {}).setdefault(p["addr"], []).append(i)
        return out

    def own_addrs(self, j: int) -> list[str]:
        return list((self.records.get(j) or {}).get("addrs") or [])

    # -- drift
    def drift(self, section: str) -> dict[str, dict[str, list[int]]]:
        """key -> {value: [nodes]} for every key whose value differs between reporting nodes."""
        values: dict[str, dict[int, str]] = {}
        done = [i for i in range(self.world) if self.finished(i)]
        for i in done:
            for k, v in (self.records[i].get(section) or {}).items():
                values.setdefault(k, {})[i] = v
        out = {}
        for k, per in values.items():
            groups: dict[str, list[int]] = {}
            for i in done:
                groups.setdefault(per.get(i, "(unset)"), []).append(i)
            if len(groups) > 1:
                out[k] = groups
        return out

    # -- fingerprint (DD720)
    def fingerprint(self, i: int) -> dict[str, str]:
        """Versions, NCCL_/GLOO_ settings and key variables of node i, flattened."""
        r = self.records.get(i) or {}
        return {**(r.get("versions") or {}), **(r.get("settings") or {}), **(r.get("env") or {})}

    def majority_fingerprint(self) -> dict[str, str]:
        """Per key, the value most reporting nodes have (unset counts as a value)."""
        done = [i for i in range(self.world) if self.finished(i)]
        fps = [self.fingerprint(i) for i in done]
        keys = sorted({k for fp in fps for k in fp})
        out = {}
        for k in keys:
            (v, _), = Counter(fp.get(k, "(unset)") for fp in fps).most_common(1)
            if v != "(unset)":
                out[k] = v
        return out

    def fingerprint_diffs(self) -> dict[int, dict[str, tuple[str, str]]]:
        """node -> {key: (its value, the reference's)} for keys that differ from the reference
        (the file given, else the majority). A reference compares only the keys it names."""
        ref = self.reference if self.reference is not None else self.majority_fingerprint()
        out: dict[int, dict[str, tuple[str, str]]] = {}
        for i in range(self.world):
            if not self.finished(i):
                continue
            fp = self.fingerprint(i)
            keys = ref.keys() if self.reference is not None else set(ref) | set(fp)
            d = {k: (fp.get(k, "(unset)"), ref.get(k, "(unset)")) for k in sorted(keys)
                 if fp.get(k, "(unset)") != ref.get(k, "(unset)")}
            if d:
                out[i] = d
        return out

    # -- verdict per node
    def local_failures(self) -> dict[int, list[dict]]:
        out = {}
        for i in range(self.world):
            if self.finished(i):
                bad = [r for r in self.records[i].get("local") or [] if r.get("status") == "fail"]
                if bad:
                    out[i] = bad
        return out

    @property
    def pairing(self) -> dict | None:
        """The two pairing rounds' verdict (large clusters, slurm/pairing.py), else None."""
        return (self.records.get(0) or {}).get("pairing")

    def failing(self) -> list[int]:
        """Nodes to exclude so that every remaining pair connects: missing nodes, nodes whose own
        checks fail, the pairing rounds' bad nodes, then a greedy cover of the broken pairs (a pair
        blames the node both ends share most, the receiving end on a tie: a firewall usually drops
        what comes in)."""
        bad = set(self.missing) | set(self.local_failures())
        if self.pairing:
            bad |= set(self.pairing.get("bad") or [])
        pairs = [(p.src, p.dst) for p in self.pairs() if p.src not in bad and p.dst not in bad]
        while pairs:
            score: Counter = Counter()
            for s, d in pairs:
                score[s] += 2
                score[d] += 3  # the receiver's side wins ties
            worst = max(score, key=lambda n: (score[n], n))
            bad.add(worst)
            pairs = [(s, d) for s, d in pairs if worst not in (s, d)]
        return sorted(bad)

    def passing(self) -> list[int]:
        bad = set(self.failing())
        return [i for i in range(self.world) if i not in bad]

    def label(self, idxs: Sequence[int]) -> str:
        from ddpdoctor.slurm import hostlist
        try:
            return hostlist.collect([self.names[i] for i in idxs])
        except Exception:  # noqa: BLE001 - names python-hostlist cannot fold: list them
            return ",".join(self.names[i] for i in idxs)

    # -- text
    def matrix_text(self) -> str:
        n = self.world
        if n > MATRIX_MAX:
            return self.summary_text()
        w = len(str(n))
        width = max(len(x) for x in self.names) + w + 3
        lines = [f"reachability (row probes column) on port {self.port} and an ephemeral port:"]
        digits = [str(j + 1).rjust(w) for j in range(n)]
        for k in range(w):
            lines.append(" " * width + " ".join(d[k] for d in digits))
        for i in range(n):
            head = f"{str(i + 1).rjust(w)} {self.names[i]}".ljust(width)
            lines.append(head + " ".join(CELL_TEXT.get(self.cell(i, j), self.cell(i, j)) for j in range(n)))
        lines.append(LEGEND)
        return "\n".join(lines)

    def summary_text(self) -> str:
        probed = sum(1 for i in range(self.world) for j in range(self.world) if i != j and self.probe(i, j) is not None)
        pairs = self.pairs()
        lines = [f"{self.world} nodes: {probed} probes ({self.world * (self.world - 1)} pairs), {len(pairs)} failed; "
                 f"missing: {self.label(self.missing) or 'none'}"]
        by_dst = Counter(p.dst for p in pairs)
        for j, c in by_dst.most_common(10):
            lines.append(f"  {self.names[j]}: unreachable from {c} node(s)")
        return "\n".join(lines)
