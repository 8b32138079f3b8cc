"""DD3xx: which interface Gloo and NCCL will use, and whether it reaches the master."""
from __future__ import annotations

from ddpdoctor.checks.dns import unresolved
from ddpdoctor import ifname
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.facts.network import is_loopback, nic_with_addr
from ddpdoctor.registry import Skip, check


def recommended_env(ctx) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME for the interface the kernel routes to the master on."""
    nic = ctx.route_nic
    if not nic or nic.is_loopback:  # loopback only serves a single-host job: nothing to pin
        return {}
    return {"GLOO_SOCKET_IFNAME": nic.name, "NCCL_SOCKET_IFNAME": ifname.nccl_exact([nic.name])}


def _route_fix(ctx, summary: str, only: str | None = None) -> Fix | None:
    env = recommended_env(ctx)
    if only:
        env = {k: v for k, v in env.items() if k == only}
    return Fix(summary, (), env) if env else None


def _nic_state(ctx, name: str) -> str:
    for n in ctx.nics:
        if n.name == name:
            if not n.is_up:
                return "down"
            return "up" if n.addrs else "up, no address"
    return "missing"


@check("DD301", "NCCL_SOCKET_IFNAME selects a usable interface", category="nic", tags={"network", "prolog"}, timeout=3)
def nccl_ifname_valid(ctx):
    """## What it checks
    If `NCCL_SOCKET_IFNAME` is set: it selects, in NCCL's grammar, at least one interface that is up
    and has an address, and the first one selected (the one NCCL bootstraps on) is the interface
    that routes to the master.

    ## Why it matters
    NCCL uses only the interfaces this variable selects. A typo (`eht0`) or a name from another
    host fails with `Bootstrap : no socket interface found` or hangs in `init_process_group`. It
    matches *prefixes*: `eth1` also selects `eth10`; a leading `=` makes names exact and `^` excludes.

    ## Fix
    Select the interface that reaches the master, exactly: `NCCL_SOCKET_IFNAME==eth0`.
    """
    spec = ctx.env.get("NCCL_SOCKET_IFNAME")
    if spec is None:
        raise Skip("NCCL_SOCKET_IFNAME is not set (DD304 judges NCCL's own choice)")
    if len(spec) <= 1:
        yield Finding(Severity.WARNING, f"NCCL_SOCKET_IFNAME={spec!r} is ignored by NCCL (one character or empty)",
                      fix=_route_fix(ctx, "set it to the interface that reaches the master, or unset it", "NCCL_SOCKET_IFNAME"), kind="ignored")
        return
    spaced = ifname.spaced_names(spec)
    if spaced:
        yield Finding(Severity.WARNING, f"NCCL_SOCKET_IFNAME={spec!r}: NCCL keeps the spaces, so "
                      f"{', '.join(repr(n) for n in spaced)} selects no interface",
                      hint="NCCL's parseStringList splits on ',' only and keeps every other character",
                      fix=Fix("remove the spaces", (), {"NCCL_SOCKET_IFNAME": ifname.without_spaces(spec)}),
                      evidence={"value": spec, "spaced": list(spaced)}, kind="spaces")
    matched = ifname.nccl_matches(spec, ctx.nics)
    up = [n for n in matched if n.is_up]
    ev = {"value": spec, "matched": [n.name for n in matched], "up": [n.name for n in ctx.nics if n.is_up]}
    if not up:
        what = ("selects no interface with an address" if not matched
                else f"selects only interfaces that are down: {', '.join(n.name for n in matched)}")
        yield Finding(Severity.ERROR, f"NCCL_SOCKET_IFNAME={spec!r} {what}",
                      hint=f"interfaces up on {ctx.hostname}: {', '.join(n.name for n in ctx.nics if n.is_up and n.addrs)}",
                      fix=_route_fix(ctx, "select the interface that routes to the master", "NCCL_SOCKET_IFNAME"),
                      evidence=ev, kind="no-match")
        return
    route = ctx.route_nic
    if route and not ctx.master_is_local and matched[0].name != route.name:
        yield Finding(Severity.ERROR if route.name not in ev["matched"] else Severity.WARNING,
                      f"NCCL_SOCKET_IFNAME={spec!r} makes NCCL bootstrap on {matched[0].name}, "
                      f"but the master is reached through {route.name}",
                      fix=_route_fix(ctx, f"select {route.name} exactly", "NCCL_SOCKET_IFNAME"), evidence=ev, kind="other-route")


@check("DD302", "GLOO_SOCKET_IFNAME names usable interfaces", category="nic", tags={"network", "prolog"}, timeout=3)
def gloo_ifname_valid(ctx):
    """## What it checks
    If `GLOO_SOCKET_IFNAME` is set: every name is an existing interface that is up and has an
    address, the value is not in NCCL's grammar (`^`, `=`), and the interface reaches the master.

    ## Why it matters
    Gloo takes exact interface names (a comma-separated list makes one device per name); an
    unknown or down name fails process-group creation, and `^lo` or `=eth0` are read as literal
    interface names that do not exist.

    ## Fix
    Set it to the exact name of the interface that routes to the master: `GLOO_SOCKET_IFNAME=eth0`.
    """
    spec = ctx.env.get("GLOO_SOCKET_IFNAME")
    if spec is None:
        raise Skip("GLOO_SOCKET_IFNAME is not set (DD303 judges Gloo's own choice)")
    names = ifname.parse_gloo(spec)
    fix = _route_fix(ctx, "use the exact name of the interface that routes to the master", "GLOO_SOCKET_IFNAME")
    if spec.startswith(("^", "=")) or not names:
        yield Finding(Severity.ERROR, f"GLOO_SOCKET_IFNAME={spec!r} uses NCCL's syntax; Gloo takes plain interface names"
                      if names else f"GLOO_SOCKET_IFNAME={spec!r} names no interface", fix=fix, evidence={"value": spec}, kind="nccl-syntax")
        return
    spaced = ifname.spaced_names(spec)
    if spaced:
        yield Finding(Severity.ERROR, f"GLOO_SOCKET_IFNAME={spec!r}: torch keeps the spaces, so Gloo looks for an "
                      f"interface named {spaced[0]!r} and process-group creation fails "
                      f"(\"Unable to find address for: {spaced[0]}\")",
                      fix=Fix("remove the spaces", (), {"GLOO_SOCKET_IFNAME": ifname.without_spaces(spec)}),
                      evidence={"value": spec, "spaced": list(spaced)}, kind="spaces")
        return
    for name in names:
        state = _nic_state(ctx, name)
        if state != "up":
            yield Finding(Severity.ERROR, f"GLOO_SOCKET_IFNAME names {name!r}, which is {state} on {ctx.hostname}",
                          hint=f"interfaces up: {', '.join(n.name for n in ctx.nics if n.is_up and n.addrs)}",
                          fix=fix, evidence={"value": spec, "interface": name, "state": state}, kind="down")
    route = ctx.route_nic
    if route and not ctx.master_is_local and route.name not in names and all(_nic_state(ctx, n) == "up" for n in names):
        yield Finding(Severity.ERROR, f"GLOO_SOCKET_IFNAME={spec!r}, but the master is reached through {route.name}",
                      hint="Gloo advertises that interface's address; the other nodes may not reach it", fix=fix,
                      evidence={"value": spec, "route": route.name}, kind="other-route")


@check("DD303", "Gloo's default interface reaches the master", category="nic", tags={"network", "prolog"}, timeout=4)
def gloo_default_reaches_master(ctx):
    """## What it checks
    With `GLOO_SOCKET_IFNAME` unset, Gloo binds the first address the hostname resolves to that
    can be bound here (torch `ProcessGroupGloo::createDefaultDevice`), else loopback. This check
    predicts that address and its interface and compares it with the interface the kernel
    routes to the master through.

    ## Why it matters
    Gloo advertises the bound address to its peers. An address on another interface (a docker
    bridge, a management NIC, a VPN) is often unreachable for them: rendezvous succeeds and the
    process group fails with `connect: Network is unreachable` or times out. Measured with torch
    2.13: of each pair, the rank with the higher address connects (from a kernel-chosen source)
    and the lower one listens on its advertised address, so the fault bites only for peers whose
    address is above the stray one: a 2-node test can pass and a larger job fail.

    ## Fix
    Export `GLOO_SOCKET_IFNAME=<interface that routes to the master>`, or map the hostname to that
    interface's address.
    """
    if ctx.env.get("GLOO_SOCKET_IFNAME"):
        raise Skip("GLOO_SOCKET_IFNAME is set (DD302 judges it)")
    if not ctx.master_addr:
        raise Skip(unresolved("the master", ctx.master_res) + " (DD205)")
    r = ctx.local_res
    if r.no_answer:  # no answer is not "no address": Gloo's choice is unknown until the resolver answers
        raise Skip(unresolved("the hostname", r) + " (DD201)")
    usable = [a for a in r.addrs if a in ctx.local_addrs or is_loopback(a)]
    addr = usable[0] if usable else "127.0.0.1"
    if is_loopback(addr) and not is_loopback(ctx.master_addr):
        why = "DD202" if usable else ("DD201" if not r.ok else "DD203")
        yield Finding(Severity.ERROR, f"Gloo would bind loopback {addr} (see {why}): the other nodes cannot reach it",
                      fix=_route_fix(ctx, "name the interface that routes to the master", "GLOO_SOCKET_IFNAME"),
                      evidence={"gloo_addr": addr}, kind="loopback")
        return
    nic = nic_with_addr(ctx.nics, addr)
    route = ctx.route_nic
    ev = {"gloo_addr": addr, "gloo_interface": nic.name if nic else None, "route_interface": route.name if route else None}
    if ctx.master_is_local or not route or (nic and nic.name == route.name):
        yield Finding(Severity.INFO, f"Gloo would use {addr} on {nic.name if nic else '?'}", evidence=ev, kind="ok")
        return
    yield Finding(Severity.ERROR,
                  f"Gloo would bind {addr} on {nic.name if nic else '?'} ({ctx.hostname} resolves there), "
                  f"but the master {ctx.master} is reached through {route.name} ({ctx.route.src_addr})",
                  hint="peers with a higher address dial that address and fail (connect: Network is unreachable)",
                  fix=_route_fix(ctx, f"make Gloo use {route.name}", "GLOO_SOCKET_IFNAME"), evidence=ev, kind="unusable")


@check("DD304", "NCCL's default interface reaches the master", category="nic", tags={"network", "prolog"}, timeout=3)
def nccl_default_reaches_master(ctx):
    """## What it checks
    With `NCCL_SOCKET_IFNAME` unset, NCCL picks `ib*` interfaces first, then anything but
    `docker*` and `lo*`, then `docker*`, then `lo`, in getifaddrs order, and bootstraps on the first
    (NCCL `ncclFindInterfaces`). This check predicts that choice and compares it with the interface
    that routes to the master.

    ## Why it matters
    On hosts with several NICs the first one is often a management or container interface; NCCL
    then bootstraps over a path the other nodes cannot use and `init_process_group` hangs or fails
    with `socketStartConnect: Connect to ... failed`.

    ## Fix
    Export `NCCL_SOCKET_IFNAME==<interface that routes to the master>` (exact match).
    """
    if ctx.env.get("NCCL_SOCKET_IFNAME") and len(ctx.env["NCCL_SOCKET_IFNAME"]) > 1:
        raise Skip("NCCL_SOCKET_IFNAME is set (DD301 judges it)")
    if not ctx.master_addr:
        raise Skip(unresolved("the master", ctx.master_res) + " (DD205)")
    pick, rule = ifname.nccl_default_choice(ctx.nics, ctx.env)
    route = ctx.route_nic
    ev = {"nccl_interface": pick.name if pick else None, "rule": rule, "route_interface": route.name if route else None}
    if pick is None:
        yield Finding(Severity.ERROR, "NCCL would find no interface with an address", evidence=ev,
                      fix=_route_fix(ctx, "bring up the interface that reaches the master", "NCCL_SOCKET_IFNAME"), kind="no-interface")
        return
    if ctx.master_is_local or not route or pick.name == route.name:
        yield Finding(Severity.INFO, f"NCCL would bootstrap on {pick.name} (rule {rule!r})", evidence=ev, kind="ok")
        return
    sev = Severity.ERROR if pick.is_loopback or not pick.is_up else Severity.WARNING
    yield Finding(sev, f"NCCL would bootstrap on {pick.name}{' (down)' if not pick.is_up else ''}, "
                       f"but the master {ctx.master} is reached through {route.name}",
                  hint="matters when the job uses NCCL (GPUs); Gloo-only jobs ignore it",
                  fix=_route_fix(ctx, f"make NCCL use {route.name}", "NCCL_SOCKET_IFNAME"), evidence=ev, kind="suspect")


@check("DD305", "interfaces and the recommended *_SOCKET_IFNAME", category="nic", tags={"network"}, timeout=3, order=1)
def interface_summary(ctx):
    """## What it checks
    Lists the interfaces (state, addresses, MTU, speed) and the values of `GLOO_SOCKET_IFNAME` and
    `NCCL_SOCKET_IFNAME` that select the interface routing to the master. Informational; it also
    warns when that interface's MTU differs from the others that are up.

    ## Why it matters
    Pinning both variables to the interface that reaches the master makes the job independent of
    hostname resolution and interface order; it is the most common fix for multi-node hangs.

    ## Fix
    Export the two recommended variables on every node (each node may name its own interface).
    """
    rec = recommended_env(ctx)
    listing = []
    for n in ctx.nics:
        state = "up" if n.is_up else "down"
        speed = f" {n.speed_mbps} Mb/s" if n.speed_mbps else ""
        listing.append(f"{n.name} {state} mtu {n.mtu}{speed} {' '.join(n.addrs) or '-'}")
    if rec:
        msg = "recommended: " + " ".join(f"{k}={v}" for k, v in rec.items())
    elif ctx.route_nic and ctx.route_nic.is_loopback:
        msg = "the master is this host via loopback; for a multi-node job pass --master <the name the workers use>"
    else:
        msg = "no recommendation (no route to the master)"
    yield Finding(Severity.INFO, msg, hint="; ".join(listing), evidence={"recommended_env": rec, "interfaces": ctx.nics})
