"""Which peers a node probes, and the probes themselves: resolve the peer's name as a job would,
connect to its rendezvous port (the handshake names the host that answers) and its ephemeral port,
then, in the pairing rounds, move 1 MiB each way through the peer's listener and all-reduce 1 MiB
over Gloo with it (allreduce.py)."""
from __future__ import annotations

import dataclasses
import random
import socket
import threading
import time
from typing import Mapping, Sequence

from ddpdoctor.facts.cluster import OK, cell
from ddpdoctor.facts.noderecord import PairSide, PeerProbe, PortProbe
from ddpdoctor.probes.handshake import hello as hello_probe
from ddpdoctor.probes import dns, sockets


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


def ProbeListener(port: int, me: str, *, port_range: tuple[int, int] | None = None):
    """The handshake server of `network --listen`, kept running in the background for as long as
    peers may probe; a port already taken is recorded in `port_error` instead of failing."""
    from ddpdoctor.peerprobe.server import ProbeServer

    return ProbeServer(port, me, port_range=port_range, require_port=False)


# ----------------------------------------------------------------------------- probes

def probe_peer(name: str, *, port: int, eport: int | None, expect: Sequence[str], me: str,
               timeout: float) -> PeerProbe:
    """Resolve `name` as a job would and connect to its rendezvous and ephemeral ports.

    `expect` holds the names the peer answers to (its node name and hostname): a handshake answered
    by another host means the name resolves to the wrong machine.
    """
    r = dns.resolve(name, timeout=timeout)
    # a resolver that failed (SERVFAIL/REFUSED: EAI_AGAIN) gave no answer, like one that timed out (issue 21)
    looked_up = PeerProbe(name, tuple(r.addrs), r.error, round(r.duration_s * 1000, 1), r.no_answer)
    addr = (r.ipv4 or r.addrs or (None,))[0]
    if r.ipv4 and len(r.ipv4) != len(r.addrs):
        # A and AAAA: probe the address torch's c10d would try first (see dns.c10d_order, DD210)
        addr = (dns.c10d_order(name, timeout=timeout).addrs or (addr,))[0]
    if addr is None:
        return looked_up
    t = sockets.tcp_probe(addr, port, timeout=timeout)
    rdzv = PortProbe(t.state, round(t.latency_s * 1000, 1), t.error)
    if t.state == sockets.OPEN:
        h = hello_probe(addr, port, me, timeout=timeout)
        wrong = h.is_ddpdoctor and expect and h.peer_host not in expect and h.peer_host != "?"
        rdzv = PortProbe("wrong-host" if wrong else t.state, rdzv.ms, rdzv.error, h.is_ddpdoctor,
                         h.peer_host if h.is_ddpdoctor else "")
    eph = None
    if eport:
        from ddpdoctor.probes.handshake import ephemeral
        e = ephemeral(addr, eport, me, timeout=timeout)
        eph = PortProbe(e.state, round(e.latency_s * 1000, 1), e.error, port=eport)
    return dataclasses.replace(looked_up, addr=addr, rdzv=rdzv, eph=eph)


@dataclasses.dataclass(frozen=True)
class Target:
    """A peer to probe: the name a job would use, its ephemeral port, whether it said hello, and the
    names its handshake may answer with (its node name and hostname)."""
    name: str
    eport: int | None = None
    hello: bool = False
    expect: tuple[str, ...] = ()


def probe_all(targets: Mapping[int, Target], *, port: int, me: str, timeout: float) -> dict[int, PeerProbe]:
    """Probe every target at once (a thread each, bounded by the probe timeout)."""
    results: dict[int, PeerProbe] = {}
    lock = threading.Lock()

    def one(j: int, info: Target) -> None:
        try:
            res = probe_peer(info.name, port=port, eport=info.eport, expect=info.expect, me=me, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - a probe bug must not lose the others
            res = PeerProbe(info.name, error=f"{type(e).__name__}: {e}")
        if not info.hello:
            res = dataclasses.replace(res, no_hello=True)
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


def pair_tests(probes: Mapping[int, PeerProbe], *, port: int, probe_timeout: float,
               allreduce: tuple[str, int, str, int] | None = None) -> dict[int, PairSide]:
    """This node's side of each pair test: both ports answered, then 1 MiB each way through the
    peer's listener (probes/pathmtu.bulk) within the probe timeout, then (with `allreduce` =
    (store host, store port, round tag, this node's index)) a 2-rank Gloo all-reduce of 1 MiB
    (cluster/allreduce.py): ok and seconds, per peer."""
    from ddpdoctor.probes import pathmtu
    out: dict[int, PairSide] = {}
    lock = threading.Lock()

    def one(j: int, p: PeerProbe) -> None:
        res = PairSide(False, 0.0, cell(p))
        if res.cell == OK and p.addr:
            b = pathmtu.bulk(p.addr, port, socket.gethostname(), deadline_s=probe_timeout,
                             connect_timeout=probe_timeout)
            res = PairSide(b.complete, round(b.up_s + b.down_s, 4), res.cell,
                           {"sent_ok": b.sent_ok, "back_ok": b.back_ok, "error": b.error, "complete": b.complete})
        if allreduce is not None and res.cell == OK:
            # both ends join whatever the transfer showed: the peer cannot know our result, and a
            # group it waits for alone would only cost it the timeout
            from ddpdoctor.cluster.allreduce import pair_allreduce, pair_prefix
            host, sport, tag, me = allreduce
            a = pair_allreduce(host, sport, pair_prefix(tag, me, j), 0 if me < j else 1, probe_timeout)
            res = dataclasses.replace(res, ok=res.ok and a["ok"], seconds=round(res.seconds + a["seconds"], 4),
                                      allreduce=a)
        with lock:
            out[j] = res

    threads = [threading.Thread(target=one, args=(j, p), daemon=True) for j, p in probes.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5 * probe_timeout + 3)  # transfer (bulk) + all-reduce (2 x timeout), each bounded
    with lock:
        return dict(out)
