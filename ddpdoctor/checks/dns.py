"""DD2xx: names and resolution for rendezvous."""
from __future__ import annotations

import ipaddress
import shlex

from ddpdoctor.checks import hostsfile
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.facts import network as sockets  # the port states the probes report (OPEN, FILTERED, ...)
from ddpdoctor.facts.network import is_loopback
from ddpdoctor.registry import Skip, check
from ddpdoctor.validate import BadInput, validate_host

SLOW_RESOLVER_S = 1.0


def _no_answer(label: str, r) -> Finding:
    """A resolver that did not answer in time, or answered with a failure (SERVFAIL, REFUSED:
    EAI_AGAIN), is slow, unreachable or failing DNS, not a name that does not resolve: a warning
    (the prolog counts it as a fault only with prolog.drain_on_timeout = true). Only a real
    negative answer (EAI_NONAME, EAI_NODATA) is an error."""
    why = "DNS server failed to answer" if r.temporary and not r.timed_out else "slow or unreachable DNS server"
    return Finding(Severity.WARNING, f"{label}: {r.error} ({why}; cannot tell whether it resolves)",
                   hint="the job's own lookups would stall the same way; rendezvous may time out",
                   fix=Fix("list the cluster's names in /etc/hosts or fix the first nameserver",
                           ("cat /etc/resolv.conf", f"time getent ahosts {shlex.quote(r.name)}")),
                   evidence={"name": r.name, "error": r.error, "timed_out": True,
                             "duration_s": round(r.duration_s, 3)})


def unresolved(what: str, r) -> str:
    """Why a dependent check skips: a negative answer and no answer are different things."""
    if r.temporary and not r.timed_out:
        return f"{what} got a resolver failure, not an answer"
    return f"{what} got no answer from the resolver in time" if r.no_answer else f"{what} does not resolve"


def shell_safe_name(name: str) -> str | None:
    """`name` when it is a valid host name or address (safe inside a suggested command), else None.
    gethostname() returns whatever sethostname() was given: never paste that into a shell line."""
    try:
        return validate_host(name, allow_ipv6=True)
    except (BadInput, TypeError):
        return None


def _hosts_line_fix(ctx, summary: str, *, with_env: bool = True) -> Fix:
    """The /etc/hosts line that maps this host's name to the address that reaches the master,
    plus (`with_env`) GLOO_SOCKET_IFNAME for that interface where the variable alone fixes it."""
    addr = ctx.route.src_addr if ctx.route and ctx.route.ok and not is_loopback(ctx.route.src_addr) else None
    name = shell_safe_name(ctx.hostname)
    add = hostsfile.append_command(addr, name) if addr and name else None
    cmds = (add,) if add else ()
    env = {}
    if with_env and ctx.route_nic and not ctx.route_nic.is_loopback:
        env = {"GLOO_SOCKET_IFNAME": ctx.route_nic.name}
    return Fix(summary, cmds, env)


@check("DD201", "this host's name resolves", category="dns", tags={"network", "prolog"}, timeout=4)
def hostname_resolves(ctx):
    """## What it checks
    `getaddrinfo(gethostname())` returns at least one address on this host.

    ## Why it matters
    torchrun's c10d rendezvous and Gloo's default device both resolve the local hostname.
    Measured with torch 2.13: with the c10d rendezvous the agent on that node crashes with
    `socket.gaierror: [Errno -2] Name or service not known` (in `_matches_machine_hostname`) while
    the master waits silently for the 600 s join timeout; with the static rendezvous Gloo falls
    back to loopback and the *healthy* rank 0 fails first, naming 127.0.0.1.

    ## Fix
    Add the host's own address to `/etc/hosts` (or DNS): `198.18.1.2 node2`. An interface
    variable is not enough with c10d (the agent itself needs the name); with the static
    rendezvous `GLOO_SOCKET_IFNAME` works around it.
    """
    r = ctx.local_res
    if r.ok:
        yield Finding(Severity.INFO, f"{ctx.hostname} -> {', '.join(r.addrs)} ({r.duration_s * 1000:.0f} ms)",
                      evidence={"hostname": ctx.hostname, "addrs": r.addrs}, kind="ok")
        return
    if r.no_answer:
        yield _no_answer(f"this host's name {ctx.hostname!r}", r)
        return
    yield Finding(Severity.ERROR, f"this host's name {ctx.hostname!r} does not resolve: {r.error}",
                  hint="torchrun's c10d agent crashes with socket.gaierror; static rendezvous: Gloo falls back to loopback",
                  fix=_hosts_line_fix(ctx, f"make {ctx.hostname} resolve to the address that reaches the master",
                                      with_env=False),
                  evidence={"hostname": ctx.hostname, "error": r.error}, kind="unresolved")


@check("DD202", "this host's name does not resolve to loopback", category="dns", tags={"network", "prolog"}, timeout=4)
def hostname_not_loopback(ctx):
    """## What it checks
    The addresses the local hostname resolves to are not loopback (127.0.0.0/8, ::1), unless the
    whole job runs on this host.

    ## Why it matters
    Debian and Ubuntu write `127.0.1.1 <hostname>` into `/etc/hosts`. Gloo binds the address the
    hostname resolves to and tells its peers to connect there: the other nodes then dial their own
    loopback, and the job fails to connect or hangs in the first collective.

    A job on this host alone works: with `--master 127.0.0.1` the check passes, with a master name
    that resolves to loopback (or in the prolog of a one-node job) it warns; in a multi-node job's
    prolog there is no "the master is this host" excuse: it fails.

    ## Fix
    Map the hostname to the address of the interface that reaches the other nodes in `/etc/hosts`,
    or export `GLOO_SOCKET_IFNAME` (and `NCCL_SOCKET_IFNAME`) for that interface. The suggested
    command removes only the hostname, as a whole name, from the loopback lines (`localhost` and
    the FQDN stay; a line left with no name is commented out), keeps a backup in
    `/etc/hosts.ddpdoctor.bak`, then appends the routable line.
    """
    r = ctx.local_res
    if not r.ok:
        raise Skip(unresolved("the hostname", r) + " (DD201)")
    first = r.addrs[0]
    if not is_loopback(first):
        return
    nodes = getattr(ctx, "nodes", None)  # the prolog knows the job's nodes; it has no master of its own
    if nodes is None and ctx.master_addr and is_loopback(ctx.master_addr) and ctx.master_addr == ctx.master:
        # `network --master 127.0.0.1`: the user said the whole job runs on this host
        yield Finding(Severity.INFO, f"{ctx.hostname} -> {first} (loopback), fine while the whole job runs on this host",
                      kind="ok")
        return
    fix = _hosts_line_fix(ctx, f"map {ctx.hostname} to its routable address instead of {first}")
    if ctx.route_nic and not ctx.route_nic.is_loopback:
        # only the name leaves the loopback lines (localhost and the FQDN stay); then the routable line
        unmap = hostsfile.unmap_command(shell_safe_name(ctx.hostname) or "")
        fix = Fix(fix.summary, (*((unmap,) if unmap and fix.commands else ()), *fix.commands),
                  {**fix.env, "NCCL_SOCKET_IFNAME": "=" + ctx.route_nic.name})
    ev = {"hostname": ctx.hostname, "addrs": r.addrs}
    # one host as far as we know: a one-node job (prolog), or a master name that itself resolves to loopback
    one_host = (len(nodes) <= 1 if nodes is not None else bool(ctx.master_addr and is_loopback(ctx.master_addr)))
    if one_host:
        where = "this one-node job" if nodes else "a job on this host alone"
        yield Finding(Severity.WARNING, f"this host's name {ctx.hostname!r} resolves to loopback {first}: fine for "
                      f"{where}; a multi-node job with this node would fail to connect",
                      hint="Gloo binds that address and advertises it: the other nodes would connect to themselves",
                      fix=fix, evidence=ev, kind="loopback-one-host")
        return
    yield Finding(Severity.ERROR, f"this host's name {ctx.hostname!r} resolves to loopback {first}",
                  hint="Gloo binds that address and advertises it: the other nodes would connect to themselves",
                  fix=fix, evidence=ev, kind="loopback")


@check("DD203", "this host's name resolves to one of its own addresses", category="dns", tags={"network", "prolog"}, timeout=4)
def hostname_is_local(ctx):
    """## What it checks
    At least one address the local hostname resolves to belongs to an interface of this host.

    ## Why it matters
    Gloo's default device binds the first resolved address it can bind. When none belongs to
    this host (a stale `/etc/hosts` entry, DNS pointing at another machine, a NAT address), Gloo
    warns `Unable to resolve hostname to a (local) address` and falls back to loopback, which the
    other nodes cannot reach.

    ## Fix
    Correct the `/etc/hosts` or DNS entry for this host, or export `GLOO_SOCKET_IFNAME` for the
    interface that reaches the master.
    """
    r = ctx.local_res
    if not r.ok:
        raise Skip(unresolved("the hostname", r) + " (DD201)")
    local = [a for a in r.addrs if a in ctx.local_addrs or is_loopback(a)]
    if local:
        return
    yield Finding(Severity.ERROR,
                  f"{ctx.hostname!r} resolves to {', '.join(r.addrs)}, none of which is an address of this host",
                  hint=f"addresses here: {', '.join(sorted(ctx.local_addrs)) or 'none'}; Gloo falls back to loopback",
                  fix=_repoint_fix(ctx, r.addrs), evidence={"addrs": r.addrs, "local": sorted(ctx.local_addrs)})


def _repoint_fix(ctx, stale: tuple[str, ...]) -> Fix:
    """Appending a line is not enough when /etc/hosts already maps the name elsewhere (the first
    line wins): remove the name from the stale lines first (a no-op when the entry is in DNS)."""
    fix = _hosts_line_fix(ctx, f"point {ctx.hostname} at this host's own address")
    unmap = hostsfile.unmap_command(shell_safe_name(ctx.hostname) or "", tuple(stale))
    return Fix(fix.summary, (unmap, *fix.commands), fix.env) if unmap and fix.commands else fix


@check("DD204", "this host's FQDN resolves", category="dns", tags={"network"}, timeout=4)
def fqdn_resolves(ctx):
    """## What it checks
    `socket.getfqdn()` names something that resolves.

    ## Why it matters
    torchrun's elastic agent reports and matches hosts by their fully-qualified name; a FQDN that
    does not resolve makes rendezvous hosts disagree on who is who.

    ## Fix
    Give the host a consistent name: the FQDN (first name after the address in `/etc/hosts`) must
    resolve on every node.
    """
    if ctx.fqdn == ctx.hostname:
        return
    r = ctx.fqdn_res
    if r.no_answer:
        yield _no_answer(f"FQDN {ctx.fqdn!r}", r)
    elif not r.ok:
        yield Finding(Severity.WARNING, f"FQDN {ctx.fqdn!r} of {ctx.hostname!r} does not resolve: {r.error}",
                      fix=Fix("make the FQDN resolve (list it in /etc/hosts or DNS)"), evidence={"fqdn": ctx.fqdn})


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


@check("DD205", "the master's name resolves", category="dns", tags={"network"}, timeout=4)
def master_resolves(ctx):
    """## What it checks
    The master address given (`--master`, else `MASTER_ADDR`) resolves on this host.

    ## Why it matters
    Every worker must resolve the rendezvous host. A name that resolves only on the master (or
    only in its own `/etc/hosts`) makes torchrun fail with `socket.gaierror` or
    `RendezvousConnectionError` on the workers.

    ## Fix
    Add the master to this node's `/etc/hosts` or DNS. Measured with torch 2.13: an IP address in
    `--rdzv-endpoint` is *not* enough with the c10d rendezvous, because the workers get
    `MASTER_ADDR` = rank 0's FQDN; add `--local-addr=<IP>` on the master too. With the static
    rendezvous `--master-addr=<IP>` is enough.
    """
    r = ctx.master_res
    if r.ok:
        yield Finding(Severity.INFO, f"{ctx.master} -> {', '.join(r.addrs)} ({r.duration_s * 1000:.0f} ms)", kind="ok")
        return
    if r.no_answer:
        yield _no_answer(f"the master {ctx.master!r}", r)
        return
    yield Finding(Severity.ERROR, f"the master {ctx.master!r} does not resolve on {ctx.hostname}: {r.error}",
                  hint="the workers must resolve the rendezvous host; test with: getent ahosts " + shlex.quote(ctx.master),
                  fix=Fix(f"add the master to /etc/hosts on {ctx.hostname} (or DNS); with an IP endpoint, c10d also "
                          "needs --local-addr=<IP> on the master",
                          tuple(c for c in [hostsfile.append_placeholder_command(
                              "MASTER_IP", shell_safe_name(ctx.master) or "")] if c)),
                  evidence={"master": ctx.master, "error": r.error}, kind="unresolved")


@check("DD206", "the master's address resolves back to a name", category="dns", tags={"network"}, timeout=4)
def master_reverse(ctx):
    """## What it checks
    Reverse resolution of the master's address (informational).

    ## Why it matters
    torch does not need reverse lookups, but NCCL and c10d log peers by name; an address with no
    name makes logs harder to read, and a reverse name of another host reveals a stale entry.

    ## Fix
    Add a PTR record or an `/etc/hosts` line for the master.
    """
    if not ctx.master_addr:
        raise Skip(unresolved("the master", ctx.master_res) + " (DD205)")
    rev = ctx.master_reverse
    if rev.names:
        yield Finding(Severity.INFO, f"{rev.addr} -> {', '.join(rev.names)}", kind="ok")
    else:
        yield Finding(Severity.INFO, f"{rev.addr} has no reverse name ({rev.error}); harmless for torch", kind="no-reverse")


@check("DD207", "name resolution is fast", category="dns", tags={"network", "prolog"}, timeout=6)
def resolver_is_fast(ctx):
    """## What it checks
    Resolving this host's name and the master's name each takes less than 1 s.

    ## Why it matters
    Rendezvous resolves names repeatedly; a resolver that times out (an unreachable DNS server
    listed first in `/etc/resolv.conf`) stalls every start by seconds per lookup and can trip
    rendezvous timeouts. A slow or silent resolver is a warning, never "does not resolve" (only a
    real negative answer is): the prolog logs it and does not drain the node unless the site sets
    `prolog.drain_on_timeout = true`.

    ## Fix
    Put the cluster's names into `/etc/hosts`, or fix the first `nameserver` in `/etc/resolv.conf`.
    """
    ctx.prefetch("local_res", "master_res")  # both lookups at once: two slow ones must fit the deadline
    for label, r in (("this host's name", ctx.local_res), ("the master's name", ctx.master_res)):
        if r.no_answer:
            yield _no_answer(f"resolving {label} {r.name!r}", r)
        elif r.duration_s > SLOW_RESOLVER_S:
            yield Finding(Severity.WARNING, f"resolving {label} {r.name!r} took {r.duration_s:.1f} s",
                          fix=Fix("list the cluster's names in /etc/hosts or fix the first nameserver",
                                  ("cat /etc/resolv.conf",)))


def _family(addr: str) -> str:
    return "IPv6" if ":" in addr else "IPv4"


@check("DD210", "torch's first address family for the master is reachable", category="dns", tags={"network"}, timeout=6)
def first_family_reachable(ctx):
    """## What it checks
    For a master name with both IPv4 (A) and IPv6 (AAAA) addresses: the order torch's c10d store
    client tries them in, and a TCP probe of the rendezvous port on each.

    ## Why it matters
    c10d's `SocketConnectOp` (torch/csrc/distributed/c10d/socket.cpp) prefers IPv6: it asks
    `getaddrinfo` for AF_INET6 with AI_V4MAPPED | AI_ALL, so both families come back in one list in
    the system's order (RFC 6724, /etc/gai.conf), and tries them in turn. A refused or unreachable
    address makes it move on; a *silently dropped* one does not: its connect waits the whole
    store timeout and then raises `The client socket has timed out ... while trying to connect to
    (master, port)` without ever trying the family that works. A name with both records where an
    ip6tables (or security group) rule drops IPv6 is a classic hang at rendezvous.

    ## Fix
    Open the port for the family torch tries first (`ip6tables -I INPUT -p tcp --dport PORT -j
    ACCEPT`), or give torch the reachable address as a literal (`MASTER_ADDR=10.0.0.1`,
    `--rdzv-endpoint=[fd00::1]:29400`), or make the name resolve only to the reachable family, or
    prefer IPv4 in getaddrinfo's order on every node (`precedence ::ffff:0:0/96 100` in /etc/gai.conf).
    """
    if ctx.master_literal:
        raise Skip("the master is given as an address: torch connects to that one")
    r = ctx.master_res
    if not r.ok:
        raise Skip("the master does not resolve (DD205)")
    fams = {_family(a) for a in r.addrs}
    if len(fams) < 2:
        raise Skip(f"{ctx.master} has {', '.join(sorted(fams))} addresses only")
    if ctx.master_is_local:
        raise Skip("this host is the master")
    order = list(ctx.c10d_order.addrs) or list(r.addrs)
    probes = ctx.family_probes
    states = {a: (probes[a].state if a in probes else "not probed") for a in order}
    ev = {"c10d_order": order, "states": states}
    first = order[0]
    open_ = [a for a in order if states[a] == sockets.OPEN]
    listing = ", ".join(f"{a} ({states[a]})" for a in order)
    if states[first] == sockets.OPEN:
        yield Finding(Severity.INFO, f"torch tries {ctx.master}'s {_family(first)} address {first} first and it "
                      f"answers on port {ctx.port}; order: {listing}", evidence=ev, kind="ok")
        return
    if not open_:
        yield Finding(Severity.INFO, f"no address of {ctx.master} answers on port {ctx.port} ({listing}); DD102 "
                      "says why", evidence=ev, kind="no-answer")
        return
    good = open_[0]
    literal = f"[{good}]" if ":" in good else good
    fix = Fix(f"open port {ctx.port} for {_family(first)} on {ctx.master}, or point torch at {good} "
              f"({_family(good)}), which answers",
              ((f"sudo ip6tables -I INPUT -p tcp --dport {ctx.port} -j ACCEPT   # on {ctx.master}" if ":" in first else
                f"sudo iptables -I INPUT -p tcp --dport {ctx.port} -j ACCEPT   # on {ctx.master}"),
               f"torchrun --rdzv-endpoint={literal}:{ctx.port} ...   # or --master-addr={good}",
               *((hostsfile.append_line_command("precedence ::ffff:0:0/96 100", "/etc/gai.conf")
                  + "   # prefer IPv4, every node",)
                 if ":" in first else ())),
              env={"MASTER_ADDR": good})
    if states[first] == sockets.FILTERED:
        yield Finding(Severity.ERROR,
                      f"{ctx.master} has IPv4 and IPv6 addresses; torch's c10d tries {first} ({_family(first)}) first and "
                      f"it silently drops port {ctx.port}: the connect waits the whole store timeout there and never "
                      f"tries {good} ({_family(good)}), which answers",
                      hint=f"order c10d uses (getaddrinfo AF_INET6 + AI_V4MAPPED|AI_ALL on {ctx.hostname}): {listing}",
                      fix=fix, evidence=ev, kind="family-dropped")
        return
    yield Finding(Severity.WARNING,
                  f"torch's c10d tries {ctx.master}'s {first} ({_family(first)}) first: {states[first]}; it then "
                  f"moves on to {good} ({_family(good)}), which answers: works, after a failed attempt per connect",
                  hint=f"order: {listing}", fix=fix, evidence=ev, kind="family-fallback")
