"""DD1xx: can this host reach the master, on the rendezvous port and on the ports collectives use."""
from __future__ import annotations

from ddpdoctor.checks.dns import unresolved
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.facts import network as sockets  # the port states the probes report (OPEN, REFUSED, ...)
from ddpdoctor.registry import Skip, check
from ddpdoctor.validate import endpoint_text


def iptables_for(addr: str) -> str:
    """The firewall command for rules about `addr`: ip6tables for an IPv6 peer (iptables ignores v6)."""
    return "ip6tables" if ":" in addr and not addr.startswith("::ffff:") else "iptables"


def _need_remote_master(ctx) -> None:
    if not ctx.master_addr:
        raise Skip(unresolved("the master", ctx.master_res) + " (DD205)")
    if ctx.master_is_local and not ctx.local_listener:
        raise Skip("this host is the master")


def _firewall_fix(ctx, port_spec: str, what: str) -> Fix:
    src = ctx.route.src_addr if ctx.route and ctx.route.ok else "<worker-subnet>"
    return Fix(
        f"on {ctx.master}, accept TCP {what} from the workers",
        (f"sudo {iptables_for(src)} -I INPUT -p tcp -s {src} --dport {port_spec} -j ACCEPT",
         f"sudo firewall-cmd --add-port={port_spec.replace(':', '-')}/tcp   # firewalld",
         f"sudo ufw allow proto tcp from {src} to any port {port_spec}   # ufw"),
    )


@check("DD101", "the master answers ping", category="reachability", tags={"network"}, timeout=4)
def master_answers_ping(ctx):
    """## What it checks
    One ICMP echo to the master (skipped where `ping` is missing or not permitted).

    ## Why it matters
    A host that does not answer at all is down or unroutable. Many clusters drop ICMP, so a lost
    ping alone is a warning: the TCP probe (DD102) decides.

    ## Fix
    Check the master is up and routable from here (`ip route get <master>`); allow ICMP echo if
    your site permits it.
    """
    _need_remote_master(ctx)
    p = ctx.ping
    if p.state == "unavailable":
        raise Skip(p.detail)
    if p.state == "ok":
        yield Finding(Severity.INFO, f"{ctx.master} ({ctx.master_addr}) answers in {p.rtt_ms:.2f} ms", kind="answers")
        return
    yield Finding(Severity.WARNING, f"{ctx.master} ({ctx.master_addr}) does not answer ping: {p.detail}",
                  hint="ICMP is often filtered; DD102's TCP probe is the one that counts",
                  fix=Fix("check that the master is up and routable", (f"ip route get {ctx.master_addr}",)), kind="no-answer")


STATE_TEXT = {
    sockets.REFUSED: "connection refused: nothing listens there, or a firewall REJECTs it",
    sockets.FILTERED: "no answer: a firewall silently drops the packets",
    sockets.UNREACHABLE: "host unreachable: no such host on the link, or an ICMP host-unreachable",
    sockets.NO_ROUTE: "network unreachable: no route to it from this host",
}


# The finding kind of each failed connect (a site silences `DD102.filtered`...); a mapping, not the raw
# state, so the kinds stay readable from the code (ddpdoctor/finding_kinds.py) and stable if a state is renamed.
STATE_KIND = {s: s for s in (sockets.REFUSED, sockets.FILTERED, sockets.UNREACHABLE, sockets.NO_ROUTE, sockets.ERROR)}


@check("DD102", "the master's rendezvous port accepts connections", category="reachability",
       tags={"network"}, timeout=6)
def rendezvous_port_open(ctx):
    """## What it checks
    A TCP connect from this host to `master:port` (the rendezvous / `MASTER_PORT` port), classified
    as open, refused, filtered (no answer before the probe timeout), unreachable or no route,
    with its latency. When `ddpdoctor network --listen` runs there, its handshake confirms that
    ddpdoctor, and not another service, answered.

    ## Why it matters
    Workers must reach the c10d store on the master. A DROP rule turns into
    `The client socket has timed out after 1800s while trying to connect to (host, port)` or a
    `RendezvousTimeoutError` after many minutes; a REJECT into `Connection refused` retries.

    ## Fix
    Start the job (or `ddpdoctor network --listen --port PORT`) on the master first, and open the
    port in the master's firewall for the workers' subnet.
    """
    _need_remote_master(ctx)
    t = ctx.tcp
    ev = {"addr": t.addr, "port": t.port, "state": t.state, "latency_ms": round(t.latency_s * 1000, 2)}
    if t.state == sockets.OPEN:
        h = ctx.hello
        who = (f"ddpdoctor on {h.peer_host}" if h and h.is_ddpdoctor
               else "a service that is not ddpdoctor (the job's c10d store, or something else)")
        yield Finding(Severity.INFO, f"{endpoint_text(ctx.master, ctx.port)} open in {t.latency_s * 1000:.1f} ms, answered by {who}",
                      evidence={**ev, "ddpdoctor": bool(h and h.is_ddpdoctor), "banner": h.banner if h else ""}, kind="open")
        return
    hint = f"probe from {ctx.hostname} ({ctx.route.src_addr if ctx.route and ctx.route.ok else '?'})"
    if t.state == sockets.REFUSED:
        fix = Fix(f"start the job or `ddpdoctor network --listen --port {ctx.port}` on {ctx.master} first; "
                  "if something listens there, remove the REJECT rule",
                  (f"ddpdoctor network --listen --port {ctx.port}   # on {ctx.master}",
                   f"sudo iptables -S INPUT | grep -- '--dport {ctx.port}'   # on {ctx.master}"))
    elif t.state in (sockets.FILTERED, sockets.ERROR):
        fix = _firewall_fix(ctx, str(ctx.port), f"port {ctx.port}")
    else:
        fix = Fix(f"make {ctx.master_addr} routable from {ctx.hostname} (same subnet or a route)",
                  (f"ip route get {ctx.master_addr}",))
    yield Finding(Severity.ERROR, f"{endpoint_text(ctx.master, ctx.port)} ({ctx.master_addr}): {STATE_TEXT.get(t.state, t.error)}",
                  hint=hint, fix=fix, evidence={**ev, "error": t.error}, kind=STATE_KIND.get(t.state, "error"))


@check("DD103", "the master's ephemeral ports accept connections", category="reachability",
       tags={"network"}, timeout=8)
def ephemeral_ports_open(ctx):
    """## What it checks
    A TCP connect to a port the master's `ddpdoctor network --listen` holds open from the master's
    ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), after the rendezvous port answered.

    ## Why it matters
    After rendezvous, Gloo and NCCL connect to each other on ephemeral ports. A firewall that
    passes only the rendezvous port lets rendezvous succeed, then the job hangs with no error that
    names the firewall. Measured with torch 2.13: with the c10d rendezvous even the workers' store
    is on an ephemeral port (rank 0's agent serves them a second TCPStore), so they fail at the
    process-group timeout with `DistStoreError: wait timeout`; with the static rendezvous Gloo
    reports `connectFullMesh failed ... Connect timeout [none]` only after about 5x that timeout.

    ## Fix
    Accept TCP from the other nodes on the ephemeral range (or trust the cluster subnet) in the
    master's and workers' firewalls.
    """
    _need_remote_master(ctx)
    if not ctx.tcp or ctx.tcp.state != sockets.OPEN:
        raise Skip("the rendezvous port is not reachable (DD102)")
    h = ctx.hello
    if not h or not h.is_ddpdoctor:
        raise Skip(f"run `ddpdoctor network --listen --port {ctx.port}` on {ctx.master} to test its ephemeral ports")
    e = ctx.ephemeral
    ev = {"eport": h.eport, "state": e.state}
    if e.state == sockets.OPEN:
        yield Finding(Severity.INFO, f"ephemeral port {h.eport} on {ctx.master} open in {e.latency_s * 1000:.1f} ms",
                      evidence=ev, kind="open")
        return
    lo, hi = h.eport_range or (h.eport, h.eport)  # the master's own range, as its listener reported it
    yield Finding(Severity.ERROR,
                  f"{endpoint_text(ctx.master, ctx.port)} is open but ephemeral port {h.eport} is not ({STATE_TEXT.get(e.state, e.error)})",
                  hint="rendezvous would succeed and the first Gloo/NCCL collective would hang",
                  fix=_firewall_fix(ctx, f"{lo}:{hi}", f"ports {lo}-{hi} (the ephemeral range)"),
                  evidence={**ev, "error": e.error}, kind="closed")


@check("DD104", "a route to the master exists", category="reachability", tags={"network"}, timeout=3)
def route_to_master(ctx):
    """## What it checks
    The kernel has a route from this host to the master's address, and which source address
    and interface it uses.

    ## Why it matters
    Without a route every connect fails with `Network is unreachable`; with a route through an
    unexpected interface, the interface Gloo/NCCL pick may not be the one that reaches the master.

    ## Fix
    Add a route or put the nodes on a common subnet (`ip route get <master>` shows the choice).
    """
    if not ctx.master_addr:
        raise Skip(unresolved("the master", ctx.master_res) + " (DD205)")
    r = ctx.route
    if r.ok:
        nic = ctx.route_nic
        yield Finding(Severity.INFO, f"to {ctx.master_addr} via {nic.name if nic else '?'} (source {r.src_addr})",
                      evidence={"src": r.src_addr, "interface": nic.name if nic else None}, kind="route")
        return
    yield Finding(Severity.ERROR, f"no route from {ctx.hostname} to {ctx.master} ({ctx.master_addr}): {r.error}",
                  fix=Fix("add a route to the master or use an address on a shared subnet",
                          (f"ip route get {ctx.master_addr}", "ip -brief addr")),
                  evidence={"error": r.error}, kind="no-route")


@check("DD105", "the rendezvous port is free on the master", category="reachability",
       tags={"network"}, timeout=3)
def master_port_free(ctx):
    """## What it checks
    On the master (when not in `--listen` mode): the rendezvous port can be bound, and if not,
    which process holds it.

    ## Why it matters
    A second job, a stale torchrun or a tool that hard-codes 29500 holding the port breaks the
    store. With the static rendezvous / `env://` it fails with `The server socket has failed to
    bind to [::]:29500 (errno: 98 - Address already in use)`. With torchrun's c10d rendezvous it
    is worse (measured with torch 2.13): the agent that cannot host the store retries as a
    *client* of whatever holds the port, and every node hangs until the rendezvous timeout.

    ## Fix
    Stop the process that holds the port, or pick another port per job (`--rdzv-endpoint
    host:PORT` / `MASTER_PORT`).
    """
    if not ctx.master_addr:
        raise Skip(unresolved("the master", ctx.master_res) + " (DD205)")
    if not ctx.master_is_local:
        raise Skip("this host is not the master")
    b = ctx.port_bind
    if b.free:
        yield Finding(Severity.INFO, f"port {ctx.port} is free", kind="free")
        return
    if ctx.local_listener:  # the README's two lines on one host: the listener is meant to hold it
        pids = ", ".join(str(h.pid) for h in ctx.port_holders if h.pid)
        yield Finding(Severity.INFO, f"port {ctx.port} is held by `ddpdoctor network --listen`"
                      f"{f' (pid {pids})' if pids else ''}, which answered this host's probes; it frees the port "
                      "when it ends, before the job starts", evidence={"port": ctx.port, "ddpdoctor_listener": True},
                      kind="ddpdoctor-listener")
        return
    holders = ctx.port_holders
    who = "; ".join(f"pid {h.pid} ({h.name}: {h.cmdline[:80]})" if h.pid else f"a process ({h.laddr})" for h in holders) \
        or "another process (run as root to see which)"
    cmds = [f"ss -ltnp 'sport = :{ctx.port}'"]
    cmds += [f"kill {h.pid}   # {h.name}" for h in holders if h.pid]
    yield Finding(Severity.ERROR, f"port {ctx.port} on {ctx.hostname} is already in use by {who}",
                  hint="static rendezvous: errno 98 EADDRINUSE; c10d rendezvous: the agents talk to that process and hang",
                  fix=Fix(f"stop that process or use another port (e.g. --rdzv-endpoint {ctx.master}:{ctx.port + 1})", tuple(cmds)),
                  evidence={"port": ctx.port, "holders": holders}, kind="in-use")


def _mib_s(nbytes: int, secs: float) -> str:
    return f"{nbytes / (1 << 20) / max(secs, 1e-6):.1f} MiB/s"


@check("DD110", "full-size packets reach the master (no path-MTU black hole)", category="reachability",
       tags={"network"}, timeout=12)
def path_mtu_carries_full_frames(ctx):
    """## What it checks
    Against `ddpdoctor network --listen` on the master: 1 MiB over TCP each way with a deadline,
    once with segments as large as the interfaces allow and, where this host's MTU is above 1500,
    once clamped to 1500-byte packets (TCP_MAXSEG); plus don't-fragment pings
    (`ping -M do -s SIZE`) at common MTUs to find the largest packet that passes. The listener
    reports its interface and MTU.

    ## Why it matters
    Hosts with jumbo frames (MTU 9000) behind a switch port, tunnel or overlay that carries only
    1500 rendezvous fine (small packets pass) and then hang on the first large Gloo or NCCL
    transfer: the switch drops the big frames without a word, no ICMP "fragmentation needed"
    comes back, and TCP never shrinks its segments. Nothing of the transfer arrives while the
    small protocol lines do: that tells a black hole apart from a slow link, which delivers a
    part.

    ## Fix
    The same MTU end to end: raise the switch ports / tunnel to the hosts' MTU, or lower the
    hosts to what the path carries (`sudo ip link set eth0 mtu 1500` on every node), or point
    `NCCL_SOCKET_IFNAME` / `GLOO_SOCKET_IFNAME` at an interface whose path carries its MTU.
    """
    _need_remote_master(ctx)
    h = ctx.hello
    if not h or not h.is_ddpdoctor:
        raise Skip(f"needs `ddpdoctor network --listen` on {ctx.master} to measure the path")
    pm = ctx.path_mtu
    full = pm.full if pm else None
    if full is None or not full.supported:
        raise Skip(f"the listener did not take the bulk probe: {full.error if full else 'no answer'}")
    sweep = pm.sweep
    largest = sweep.largest_ok if sweep and sweep.available else None
    ev = {"local_if": pm.local_if, "local_mtu": pm.local_mtu, "peer_if": pm.peer_if, "peer_mtu": pm.peer_mtu,
          "bytes": full.nbytes, "sent_ok": full.sent_ok, "back_ok": full.back_ok,
          "up_s": round(full.up_s, 3), "down_s": round(full.down_s, 3),
          "clamped": (None if pm.clamped is None else
                      {"mss": pm.clamped.mss, "complete": pm.clamped.complete, "sent_ok": pm.clamped.sent_ok,
                       "back_ok": pm.clamped.back_ok}),
          "df_largest_ok": largest, "df_smallest_lost": sweep.smallest_lost if sweep else None,
          "df_tried": {str(k): v for k, v in (sweep.tried.items() if sweep else ())}}
    here = f"{ctx.hostname} ({pm.local_if} MTU {pm.local_mtu})"
    there = f"{h.peer_host or ctx.master} ({pm.peer_if} MTU {pm.peer_mtu or '?'})"
    if full.complete:
        yield Finding(Severity.INFO, f"1 MiB each way between {here} and {there} in "
                      f"{full.up_s:.2f} s / {full.down_s:.2f} s"
                      + (f"; largest don't-fragment packet {largest} bytes" if largest else ""), evidence=ev, kind="ok")
        return
    clamped = pm.clamped
    if full.stalled and clamped is not None and clamped.complete:
        passes = largest or 1500
        lost = f"{sweep.smallest_lost}" if sweep and sweep.smallest_lost else f"{pm.local_mtu}"
        way = ("both ways" if full.sent_ok == 0 and full.back_ok == 0
               else "to the master" if full.sent_ok == 0 else "from the master")
        yield Finding(
            Severity.ERROR,
            f"path-MTU black hole between {here} and {there}: full-size packets vanish {way} "
            f"(0 of 1 MiB within the deadline), the same transfer in 1500-byte packets passes; largest packet "
            f"that passes: {passes} bytes, {lost} is lost",
            hint="the hosts' MTU is larger than a switch port, tunnel or overlay on the path carries; rendezvous "
                 "works (small packets) and the first large Gloo/NCCL transfer hangs",
            fix=Fix(f"make the MTU equal end to end: raise the path to {max(pm.local_mtu, pm.peer_mtu)} or set "
                    f"every node to {passes} (or set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to an interface "
                    "whose path carries its MTU)",
                    (f"sudo ip link set {pm.local_if} mtu {passes}   # on {ctx.hostname}",
                     f"sudo ip link set {pm.peer_if} mtu {passes}   # on {h.peer_host or ctx.master}",
                     f"ping -M do -s {pm.local_mtu - 28} -c 1 {ctx.master_addr}   # passes once fixed")),
            evidence=ev, kind="mtu-black-hole")
        return
    if full.stalled:
        if clamped is None:
            also = "; this host's MTU is 1500 or less, so the size is not the cause"
        elif clamped.stalled:
            also = "; 1500-byte packets stall too, so it is not the packet size"
        else:
            also = (f"; in 1500-byte packets {clamped.sent_ok} bytes up and {clamped.back_ok} down arrived, "
                    "so the size matters but the link is slow too")
        yield Finding(Severity.WARNING,
                      f"bulk TCP to {there} stalls: nothing of 1 MiB arrived within the deadline although the "
                      f"connection opened{also}",
                      hint="a firewall or shaper that drops by length or rate, or a broken link; low confidence "
                           "in the cause, high in the symptom", evidence=ev, kind="stall")
        return
    rate = _mib_s(min(full.sent_ok, full.back_ok), max(full.up_s, full.down_s, 1e-3))
    yield Finding(Severity.WARNING,
                  f"slow link to {there}: {full.sent_ok} bytes up and {full.back_ok} down of 1 MiB within "
                  f"the deadline (about {rate}); data flows, so not an MTU black hole",
                  hint="a congested or shaped link; collectives will be slow, not stuck", evidence=ev, kind="slow")


@check("DD111", "this host's MTU matches the master's", category="reachability", tags={"network"}, timeout=12)
def mtu_matches_master(ctx):
    """## What it checks
    The MTU of the interface that routes to the master against the MTU of the master's interface
    the connection arrived on, as `ddpdoctor network --listen` reports it.

    ## Why it matters
    Different MTUs on the two ends are the usual first half of a path-MTU black hole: the larger
    side sends frames the smaller side (or a switch port set like it) drops. TCP negotiates its
    segment size down at connect time, so some transfers work; UDP-based and RDMA transports and
    any hop in between that is set like the smaller end do not.

    ## Fix
    Configure one MTU on every node and switch port of the cluster
    (`sudo ip link set <if> mtu <N>`; persist it in the network configuration).
    """
    _need_remote_master(ctx)
    h = ctx.hello
    if not h or not h.is_ddpdoctor:
        raise Skip(f"needs `ddpdoctor network --listen` on {ctx.master} to learn its MTU")
    pm = ctx.path_mtu
    if not pm or not pm.peer_mtu:
        raise Skip("the listener did not report its MTU")
    ev = {"local_if": pm.local_if, "local_mtu": pm.local_mtu, "peer_if": pm.peer_if, "peer_mtu": pm.peer_mtu}
    if pm.local_mtu == pm.peer_mtu:
        yield Finding(Severity.INFO, f"MTU {pm.local_mtu} on {ctx.hostname} {pm.local_if} and on "
                      f"{h.peer_host or ctx.master} {pm.peer_if}", evidence=ev, kind="ok")
        return
    low = min(pm.local_mtu, pm.peer_mtu)
    yield Finding(Severity.WARNING,
                  f"MTU mismatch: {ctx.hostname} {pm.local_if} has MTU {pm.local_mtu}, "
                  f"{h.peer_host or ctx.master} {pm.peer_if} has {pm.peer_mtu}",
                  hint="DD110 says whether full-size packets still get through",
                  fix=Fix(f"set the same MTU on every node and switch port (e.g. {low})",
                          (f"sudo ip link set {pm.local_if if pm.local_mtu > low else pm.peer_if} mtu {low}",)),
                  evidence=ev, kind="mtu-mismatch")
