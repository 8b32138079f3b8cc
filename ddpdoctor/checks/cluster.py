"""DD711-DD720 (category slurm): the cluster-wide view `ddpdoctor cluster` gathers from every node of an
allocation. The checks judge the records every node published (ddpdoctor/cluster/node.py) as gathered
into ddpdoctor/facts/cluster.py, so they are tested with plain data. The prolog's GPU checks of the same
category (DD701-DD702) are in checks/slurm.py.
"""
from __future__ import annotations

from ddpdoctor.checks import drift, hostsfile
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import Skip, check



def _port_text(state: str, error: str = "") -> str:
    from ddpdoctor.checks.reachability import STATE_TEXT
    if state == "wrong-host":
        return "another host answers"
    return STATE_TEXT.get(state, error or state)


def _addr_of(ctx, i: int) -> str:
    addrs = ctx.own_addrs(i)
    return addrs[0] if addrs else "<addr of " + ctx.names[i] + ">"


def _append_hosts_line(ctx, i: int) -> tuple[str, ...]:
    """The /etc/hosts line for node i, when its address is known and both are safe in a command."""
    addrs = ctx.own_addrs(i)
    cmd = hostsfile.append_command(addrs[0], ctx.names[i]) if addrs else None
    return (cmd,) if cmd else ()


def _grouped(ctx, pairs, key):
    """{(dst, key(pair)): [src, ...]}: one finding per receiving node and failure, naming every sender."""
    groups: dict = {}
    for p in pairs:
        groups.setdefault((p.dst, key(p)), []).append(p.src)
    return groups


@check("DD711", "every node of the run reported", category="slurm", tags={"cluster"}, timeout=2)
def every_node_reported(ctx):
    """## What it checks
    Every node of the allocation (`srun -N N`) or of the torchrun job published its results in the
    store on the first node before the deadline. A node that did not is named, with what the other
    nodes saw of it: its listener answered (it runs, but cannot reach the store), or nobody reached it.

    ## Why it matters
    A node that cannot take part in a 10-second check will not take part in the training job either:
    rendezvous waits for it until `RendezvousTimeoutError`, or `init_process_group` until its timeout.

    ## Fix
    Look at that node's own output (srun shows each task's lines), and exclude it
    (`srun --exclude=$(cat failing_nodes)`) until it is repaired.
    """
    if not ctx.missing:
        yield Finding(Severity.INFO, f"all {ctx.world} node(s) reported in {ctx.elapsed_s:.1f} s", kind="ok")
        return
    for j in ctx.missing:
        name = ctx.names[j]
        rec = ctx.record(j)
        seen = ctx.seen_by(j)
        exclude = Fix(f"look at {name}'s own output, and exclude it until it is repaired", (f"srun --exclude={name} ...",))
        evidence = {"node": name, "seen_by": [ctx.names[i] for i in seen]}
        if rec is not None and rec.malformed:
            # another ddpdoctor version, or a damaged store value: its facts are unknown, not "fine"
            yield Finding(Severity.ERROR, f"{name} published a record ddpdoctor cannot read ({rec.malformed})",
                          hint="a different ddpdoctor version on that node, or a damaged value in the store",
                          fix=exclude, evidence=evidence, kind="unreadable")
            continue
        if rec is not None and rec.unfinished:
            msg = f"{name} said hello but did not finish its probes within the deadline"
            hint = "it is very slow or stuck (a hung name lookup, an overloaded node)"
        elif seen:
            msg = f"{name} never reported, but its listener answered {ctx.label(seen)}"
            hint = f"it runs, and cannot reach the store at {ctx.store} (see its own output)"
        else:
            msg = f"{name} never reported, and no node reached it"
            hint = "it did not start, crashed, or is unreachable from every node"
        yield Finding(Severity.ERROR, msg, hint=hint, fix=exclude, evidence=evidence, kind="missing")


@check("DD712", "every node resolves every other node's name", category="slurm", tags={"cluster"}, timeout=2)
def names_resolve_everywhere(ctx):
    """## What it checks
    Every node resolves the names of the peers it probes (all of them for up to 17 nodes) to one of
    that peer's own addresses, and the ddpdoctor that answers there is that peer.

    ## Why it matters
    torchrun and `MASTER_ADDR` name the rendezvous host; Gloo and NCCL exchange addresses and
    hostnames. A name that does not resolve on one node (`socket.gaierror`), or resolves to a stale
    address of another machine, fails or hangs the job on that node only.

    ## Fix
    Make the cluster's names resolve the same on every node: one /etc/hosts everywhere, or DNS.
    """
    pairs = ctx.pairs()
    silent = [p for p in pairs if p.kind == "N" and p.probe.resolve_timed_out]
    for (j, err), srcs in _grouped(ctx, silent, lambda p: p.probe.resolve_error).items():
        # no answer in time (or SERVFAIL: EAI_AGAIN) is a slow, unreachable or failing DNS server, not a name that does not resolve
        yield Finding(Severity.WARNING, f"looking up {ctx.names[j]} on {ctx.label(srcs)}: {err} "
                      "(slow, unreachable or failing DNS server; cannot tell whether it resolves)",
                      fix=Fix(f"list the cluster's names in /etc/hosts or fix the first nameserver on {ctx.label(srcs)}",
                              ("cat /etc/resolv.conf", f"time getent ahosts {ctx.names[j]}")),
                      evidence={"node": ctx.names[j], "on": [ctx.names[i] for i in srcs], "timed_out": True}, kind="slow")
    for (j, err), srcs in _grouped(ctx, [p for p in pairs if p.kind == "N" and not p.probe.resolve_timed_out],
                                  lambda p: p.probe.resolve_error).items():
        yield Finding(Severity.ERROR, f"{ctx.names[j]} does not resolve on {ctx.label(srcs)}: {err}",
                      fix=Fix(f"add {ctx.names[j]} to /etc/hosts (or DNS) on {ctx.label(srcs)}",
                              _append_hosts_line(ctx, j)),
                      evidence={"node": ctx.names[j], "on": [ctx.names[i] for i in srcs]}, kind="unresolved")
    for p in pairs:
        if p.kind == "W":
            who = (p.probe.rdzv.answered_by if p.probe.rdzv else "") or "?"
            yield Finding(Severity.ERROR,
                          f"on {ctx.names[p.src]}, {ctx.names[p.dst]} resolves to {p.probe.addr}, where {who} answers",
                          hint="a stale /etc/hosts line or DNS record points the name at another machine",
                          fix=Fix(f"correct {ctx.names[p.dst]}'s entry on {ctx.names[p.src]}",
                                  (f"getent ahosts {ctx.names[p.dst]}   # on {ctx.names[p.src]}",)),
                          evidence={"node": ctx.names[p.dst], "on": ctx.names[p.src], "addr": p.probe.addr}, kind="other-host")
    for i in range(ctx.world):
        for j, p in ctx.records[i].probes.items() if ctx.finished(i) else ():
            own = ctx.own_addrs(j)
            if p.addr and own and p.addr not in own and ctx.cell(i, j) not in ("W",):
                yield Finding(Severity.ERROR,
                              f"on {ctx.names[i]}, {ctx.names[j]} resolves to {p.addr}, not one of its addresses "
                              f"({', '.join(own)})",
                              fix=Fix(f"correct {ctx.names[j]}'s entry on {ctx.names[i]}",
                                      (f"getent ahosts {ctx.names[j]}   # on {ctx.names[i]}",)),
                              evidence={"node": ctx.names[j], "on": ctx.names[i], "addr": p.addr, "own": own}, kind="not-own-addr")


@check("DD713", "every pair of nodes connects on the rendezvous port", category="slurm", tags={"cluster"}, timeout=2)
def pairs_connect_on_rendezvous_port(ctx):
    """## What it checks
    A TCP connect, and the ddpdoctor handshake, from each node to each peer it probes on the
    rendezvous port (`--port`, 29400 by default: torchrun's c10d rendezvous). Failures are named by
    pair, `sender → receiver`, with how the connect ended (refused, no answer, unreachable).

    ## Why it matters
    Only the rendezvous host's port must be open for rendezvous, but a firewall that drops it
    between two nodes is usually a per-host rule that breaks other ports too, and any node can be
    the first node of the next job. A drop shows up as a rendezvous timeout after many minutes.

    ## Fix
    Accept TCP from the cluster's subnet on the receiving node's firewall (the commands name the pair).
    """
    port = ctx.port
    bad = [p for p in ctx.pairs() if p.kind in ("R", "X")]
    for (j, state), srcs in _grouped(ctx, bad, lambda p: p.probe.rdzv.state if p.probe.rdzv else "").items():
        cmds = tuple(f"sudo iptables -I INPUT -p tcp -s {_addr_of(ctx, i)} --dport {port} -j ACCEPT   # on {ctx.names[j]}"
                     for i in srcs[:4])
        yield Finding(Severity.ERROR, f"{ctx.label(srcs)} → {ctx.names[j]}: port {port}: {_port_text(state)}",
                      hint=f"{len(srcs)} node(s) cannot open {ctx.names[j]}:{port}",
                      fix=Fix(f"accept TCP port {port} from the other nodes on {ctx.names[j]}", cmds),
                      evidence={"receiver": ctx.names[j], "senders": [ctx.names[i] for i in srcs], "state": state,
                                "port": port}, kind="port")
    for i in range(ctx.world):
        rec = ctx.record(i)
        err = rec.port_error if rec is not None else ""
        if err:
            yield Finding(Severity.ERROR if i == 0 else Severity.WARNING,
                          f"port {port} is {err} on {ctx.names[i]}"
                          + (": the rendezvous host cannot serve it" if i == 0 else ""),
                          fix=Fix(f"find what holds port {port} on {ctx.names[i]}", (f"ss -ltnp 'sport = :{port}'",)), kind="port-held")
    if not bad:
        probed = sum(1 for i in range(ctx.world) for j in range(ctx.world) if i != j and ctx.probe(i, j) is not None)
        yield Finding(Severity.INFO, f"{probed} probe(s) reached port {port}", kind="ok")


@check("DD714", "every pair of nodes connects on an ephemeral port", category="slurm", tags={"cluster"}, timeout=2)
def pairs_connect_on_ephemeral_port(ctx):
    """## What it checks
    A TCP connect from each node to a port each peer holds open from its ephemeral range
    (`/proc/sys/net/ipv4/ip_local_port_range`), the ports Gloo and NCCL connect on after rendezvous.

    ## Why it matters
    A firewall that passes only the rendezvous port lets the job start, then the first collective
    hangs until the process-group timeout (10-30 min), naming no firewall.

    ## Fix
    Accept TCP on the ephemeral range from the other nodes (or trust the cluster's subnet).
    """
    bad = [p for p in ctx.pairs() if p.kind in ("E", "X") and p.probe.eph is not None and p.probe.eph.state != "open"]
    for (j, state), srcs in _grouped(ctx, bad, lambda p: p.probe.eph.state).items():
        rec = ctx.record(j)
        lo, hi = (rec.eport_range if rec is not None else None) or (32768, 60999)
        cmds = tuple(f"sudo iptables -I INPUT -p tcp -s {_addr_of(ctx, i)} --dport {lo}:{hi} -j ACCEPT   # on {ctx.names[j]}"
                     for i in srcs[:4])
        yield Finding(Severity.ERROR, f"{ctx.label(srcs)} → {ctx.names[j]}: ephemeral port: {_port_text(state)}",
                      hint="rendezvous would succeed and the first Gloo/NCCL collective hang",
                      fix=Fix(f"accept TCP ports {lo}-{hi} from the other nodes on {ctx.names[j]}", cmds),
                      evidence={"receiver": ctx.names[j], "senders": [ctx.names[i] for i in srcs], "state": state})


@check("DD715", "each node's name resolves to the same address everywhere", category="slurm", tags={"cluster"}, timeout=2)
def names_resolve_consistently(ctx):
    """## What it checks
    For every node, the address its name resolves to is the same on every node that resolved it.

    ## Why it matters
    Two nodes with different /etc/hosts (one image updated, one not) agree on nothing: one connects
    to the right host, the other to a stale address, and only the ranks on that node hang.

    ## Fix
    Distribute one /etc/hosts (or use DNS) so every node resolves every name alike.
    """
    for j, by_addr in sorted(ctx.resolutions().items()):
        if len(by_addr) > 1:
            parts = "; ".join(f"{a} on {ctx.label(srcs)}" for a, srcs in sorted(by_addr.items(), key=lambda kv: -len(kv[1])))
            yield Finding(Severity.ERROR, f"{ctx.names[j]} resolves differently: {parts}",
                          fix=Fix("make /etc/hosts (or DNS) agree on every node",
                                  (f"srun -N {ctx.world} getent ahosts {ctx.names[j]}",)),
                          evidence={"node": ctx.names[j], "addresses": {a: [ctx.names[i] for i in s] for a, s in by_addr.items()}})


@check("DD716", "torch, NCCL, driver and Python versions agree", category="slurm", tags={"cluster"}, timeout=2)
def versions_agree(ctx):
    """## What it checks
    The torch, NCCL, CUDA, NVIDIA driver, Python and ddpdoctor versions every node reports.

    ## Why it matters
    Nodes on different torch or NCCL versions fail in init or in the first collective (`NCCL
    version mismatch`, unpickling errors in the store, different collective algorithms that hang);
    a different driver or Python is a sign of a node outside the image everyone else runs. The same
    rule as DD504 (ddpdoctor/checks/drift.py): torch, NCCL or CUDA differing is an error; the driver,
    Python or ddpdoctor differing is a warning.

    ## Fix
    Install the same software on every node (one container image, one environment module).
    """
    differ = ctx.drift("versions")
    for key, groups in sorted(differ.items()):
        parts = "; ".join(f"{v} on {ctx.label(idx)}" for v, idx in sorted(groups.items(), key=lambda kv: -len(kv[1])))
        yield drift.finding(key, "nodes", parts, {"values": {v: [ctx.names[i] for i in idx] for v, idx in groups.items()}})
    if not differ and any(ctx.finished(i) for i in range(ctx.world)):
        v = next(ctx.records[i].versions for i in range(ctx.world) if ctx.finished(i))
        yield Finding(Severity.INFO, "same everywhere: " + ", ".join(f"{k} {val}" for k, val in sorted(v.items())))


_PER_NODE_OK = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA")


@check("DD717", "NCCL_* and GLOO_* settings agree across nodes", category="slurm", tags={"cluster"}, timeout=2)
def settings_agree(ctx):
    """## What it checks
    The `NCCL_*` and `GLOO_*` variables (and /etc/nccl.conf) every node's process sees. Interface
    and HCA names may differ per node; anything else that differs is reported.

    ## Why it matters
    NCCL settings that differ between ranks (protocol, algorithm, buffer size, IB disabled on one
    node) make ranks choose different paths: hangs and `unhandled system error`s that follow the node.

    ## Fix
    Set them in one place for every node (the job script, srun's environment, or one /etc/nccl.conf).
    """
    drift = ctx.drift("settings")
    for key, groups in sorted(drift.items()):
        parts = "; ".join(f"{v} on {ctx.label(idx)}" for v, idx in sorted(groups.items(), key=lambda kv: -len(kv[1])))
        sev = Severity.INFO if key in _PER_NODE_OK else Severity.WARNING
        yield Finding(sev, f"{key} differs across nodes: {parts}",
                      fix=None if sev is Severity.INFO else Fix(f"set {key} alike on every node"),
                      evidence={"key": key, "values": {v: [ctx.names[i] for i in idx] for v, idx in groups.items()}})


@check("DD718", "every node passes its own node checks", category="slurm", tags={"cluster"}, timeout=2)
def nodes_pass_local_checks(ctx):
    """## What it checks
    Each node ran the node-local checks of `ddpdoctor prolog` (its own name, interfaces,
    `*_SOCKET_IFNAME`, /dev/shm, locked memory, its GPUs); their failures are listed per node.

    ## Why it matters
    One node with a small /dev/shm, a hostname on loopback or a busy GPU fails the whole job; the
    cluster view names which one.

    ## Fix
    Follow each finding's fix on that node (`ddpdoctor explain DDnnn`), or exclude the node.
    """
    for i, results in sorted(ctx.local_failures().items()):
        for r in results:
            for f in r.findings:
                if f.severity == "error":
                    yield Finding(Severity.ERROR, f"{ctx.names[i]}: {r.id} {f.message}", hint=f.hint, fix=f.fix,
                                  evidence={"node": ctx.names[i], "check": r.id})


def _node_mtu(ctx, j: int) -> int | None:
    """The MTU of the interface carrying the address the other nodes reach node j at (their
    resolution of its name, by majority), else of its only non-loopback interface MTU."""
    by_addr = ctx.mtu_of(j)
    if not by_addr:
        return None
    seen = ctx.resolutions().get(j, {})
    for addr, _ in sorted(seen.items(), key=lambda kv: -len(kv[1])):
        if addr in by_addr:
            return int(by_addr[addr])
    mtus = set(by_addr.values())
    return int(mtus.pop()) if len(mtus) == 1 else None


@check("DD719", "nodes reach each other on interfaces with one MTU", category="slurm", tags={"cluster"}, timeout=2)
def mtus_agree(ctx):
    """## What it checks
    For every node that reported, the MTU of the interface carrying the address the other nodes
    resolve its name to; the nodes are grouped by MTU.

    ## Why it matters
    A node left at 1500 among jumbo-frame nodes (or the reverse, after a NIC swap or an image
    that sets the MTU) is the usual start of a path-MTU black hole: small packets pass, rendezvous
    works, and the first large Gloo/NCCL transfer with that node stalls. TCP negotiates the segment
    size per connection, so some transfers work, which makes it look intermittent.

    ## Fix
    Set one MTU on every node and switch port (`sudo ip link set <if> mtu <N>`, persisted in the
    network configuration); `ddpdoctor network` against `network --listen` (DD110) proves the path
    carries it.
    """
    groups: dict[int, list[int]] = {}
    for j in range(ctx.world):
        if ctx.finished(j):
            m = _node_mtu(ctx, j)
            if m:
                groups.setdefault(m, []).append(j)
    if not groups:
        raise Skip("no node reported its interface MTUs (nodes running an older ddpdoctor)")
    if len(groups) == 1:
        (m, idx), = groups.items()
        yield Finding(Severity.INFO, f"MTU {m} on all {len(idx)} nodes", kind="ok")
        return
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), -kv[0]))
    parts = "; ".join(f"{m} on {ctx.label(idx)}" for m, idx in ordered)
    majority, odd = ordered[0][0], [j for _, idx in ordered[1:] for j in idx]
    yield Finding(Severity.WARNING, f"MTU differs across nodes: {parts}",
                  hint=f"the odd ones: {ctx.label(odd)}; DD110 (`ddpdoctor network` against `--listen`) "
                       "tells whether full-size packets still pass",
                  fix=Fix(f"set the same MTU on every node and switch port (the majority uses {majority})",
                          (f"srun -w {ctx.label(odd)} ip -o link show   # see the interfaces' MTU",
                           f"sudo ip link set <if> mtu {majority}   # on {ctx.label(odd)}")),
                  evidence={"mtus": {str(m): [ctx.names[i] for i in idx] for m, idx in groups.items()}}, kind="differs")


_FP_ERROR_KEYS = ("torch", "nccl", "cuda", "driver")


@check("DD720", "every node's fingerprint matches the reference", category="slurm", tags={"cluster"}, timeout=2)
def fingerprints_match(ctx):
    """## What it checks
    Each node's fingerprint (torch, CUDA, NCCL, driver, Python versions; `NCCL_*`/`GLOO_*`
    settings; key variables such as `TORCH_NCCL_*`, `CUDA_*`, `LD_LIBRARY_PATH`) against a reference:
    the file given with `cluster --reference FILE` (JSON `{"torch": "2.5.1", "NCCL_IB_HCA": "mlx5"}`;
    only the keys it names are compared), else the value most nodes have. One line per node that
    differs, naming each key with its value and the reference's.

    ## Why it matters
    At hundreds of nodes the question is not "do the versions agree" but "which nodes are not
    like the others": a node with another driver, a stale container or an extra `LD_LIBRARY_PATH`
    entry loads another NCCL and hangs or crashes collectives for everyone.

    ## Fix
    Reimage or fix the nodes named (or exclude them: they are in the failing list when a version
    differs); save a known-good fingerprint from the JSON report (`cluster.fingerprint`) and pass it
    with `--reference` next time.
    """
    diffs = ctx.fingerprint_diffs()
    against = "the reference file" if ctx.reference is not None else "the majority"
    if not any(ctx.finished(i) for i in range(ctx.world)):
        raise Skip("no node reported")
    if not diffs:
        yield Finding(Severity.INFO, f"every node matches {against}", kind="ok")
        return
    for i, d in sorted(diffs.items()):
        parts = ", ".join(f"{k}={have} ({want})" for k, (have, want) in d.items())
        sev = Severity.ERROR if any(k in _FP_ERROR_KEYS for k in d) else Severity.WARNING
        yield Finding(sev, f"{ctx.names[i]} differs from {against}: {parts}",
                      hint="values in parentheses are the reference's",
                      fix=Fix(f"bring {ctx.names[i]} in line with the others (same image and environment), or exclude it",
                              (f"srun --exclude={ctx.names[i]} ...",)),
                      evidence={"node": ctx.names[i], "diff": {k: {"node": h, "reference": w} for k, (h, w) in d.items()}}, kind="differs")
