"""DD1xx: can this host reach the master, on the rendezvous port and on the ports collectives use."""
from __future__ import annotations

from ddpdoctor.checks.dns import unresolved
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.probes import sockets
from ddpdoctor.probes.procs import listeners_on
from ddpdoctor.registry import Skip, check


def iptables_for(addr: str) -> str:
    """The firewall command for rules about `addr`: ip6tables for an IPv6 peer (iptables ignores v6)."""
    return "ip6tables" if ":" in addr and not addr.startswith("::ffff:") else "iptables"


def _need_remote_master(ctx) -> None:
    if not ctx.master_addr:
        raise Skip(unresolved("the master", ctx.master_res) + " (DD205)")
    if ctx.master_is_local:
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
        yield Finding(Severity.INFO, f"{ctx.master} ({ctx.master_addr}) answers in {p.rtt_ms:.2f} ms")
        return
    yield Finding(Severity.WARNING, f"{ctx.master} ({ctx.master_addr}) does not answer ping: {p.detail}",
                  hint="ICMP is often filtered; DD102's TCP probe is the one that counts",
                  fix=Fix("check that the master is up and routable", (f"ip route get {ctx.master_addr}",)))


STATE_TEXT = {
    sockets.REFUSED: "connection refused: nothing listens there, or a firewall REJECTs it",
    sockets.FILTERED: "no answer: a firewall silently drops the packets",
    sockets.UNREACHABLE: "host unreachable: no such host on the link, or an ICMP host-unreachable",
    sockets.NO_ROUTE: "network unreachable: no route to it from this host",
}


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
        yield Finding(Severity.INFO, f"{ctx.master}:{ctx.port} open in {t.latency_s * 1000:.1f} ms, answered by {who}",
                      evidence={**ev, "ddpdoctor": bool(h and h.is_ddpdoctor), "banner": h.banner if h else ""})
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
    yield Finding(Severity.ERROR, f"{ctx.master}:{ctx.port} ({ctx.master_addr}): {STATE_TEXT.get(t.state, t.error)}",
                  hint=hint, fix=fix, evidence={**ev, "error": t.error})


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
                      evidence=ev)
        return
    lo, hi = h.eport_range or (h.eport, h.eport)  # the master's own range, as its listener reported it
    yield Finding(Severity.ERROR,
                  f"{ctx.master}:{ctx.port} is open but ephemeral port {h.eport} is not ({STATE_TEXT.get(e.state, e.error)})",
                  hint="rendezvous would succeed and the first Gloo/NCCL collective would hang",
                  fix=_firewall_fix(ctx, f"{lo}:{hi}", f"ports {lo}-{hi} (the ephemeral range)"),
                  evidence={**ev, "error": e.error})


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
                      evidence={"src": r.src_addr, "interface": nic.name if nic else None})
        return
    yield Finding(Severity.ERROR, f"no route from {ctx.hostname} to {ctx.master} ({ctx.master_addr}): {r.error}",
                  fix=Fix("add a route to the master or use an address on a shared subnet",
                          (f"ip route get {ctx.master_addr}", "ip -brief addr")),
                  evidence={"error": r.error})


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
    b = sockets.try_bind(ctx.port)
    if b.free:
        yield Finding(Severity.INFO, f"port {ctx.port} is free")
        return
    holders = listeners_on(ctx.port)
    who = "; ".join(f"pid {h.pid} ({h.name}: {h.cmdline[:80]})" if h.pid else f"a process ({h.laddr})" for h in holders) \
        or "another process (run as root to see which)"
    cmds = [f"ss -ltnp 'sport = :{ctx.port}'"]
    cmds += [f"kill {h.pid}   # {h.name}" for h in holders if h.pid]
    yield Finding(Severity.ERROR, f"port {ctx.port} on {ctx.hostname} is already in use by {who}",
                  hint="static rendezvous: errno 98 EADDRINUSE; c10d rendezvous: the agents talk to that process and hang",
                  fix=Fix(f"stop that process or use another port (e.g. --rdzv-endpoint {ctx.master}:{ctx.port + 1})", tuple(cmds)),
                  evidence={"port": ctx.port, "holders": holders})
