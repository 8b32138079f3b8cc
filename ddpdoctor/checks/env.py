"""DD8xx: the launch environment: rendezvous variables, ranks, misspelled variable names."""
from __future__ import annotations

import difflib
import ipaddress
import re

from ddpdoctor.facts import EnvContext
from ddpdoctor.knownvars import KNOWN, WATCHED_PREFIXES
from ddpdoctor.model import Finding, Fix, Severity
from ddpdoctor.registry import check
from ddpdoctor.validate import BadInput, validate_host, validate_port

_DOTTED = re.compile(r"^\d+(\.\d+){3}$")


def _host_problem(value: str) -> str:
    """'' when `value` is a plausible host for MASTER_ADDR / an endpoint, else what is wrong."""
    if value.startswith("["):
        # c10d hands MASTER_ADDR to getaddrinfo as it is, which does not take brackets
        return (f"{value!r} has brackets: torch passes MASTER_ADDR to getaddrinfo as it is, which fails on them; "
                f"write the bare address {value.strip('[]')}")
    if _DOTTED.match(value):
        octets = [int(x) for x in value.split(".")]
        bad = [str(o) for o in octets if o > 255]
        if bad:
            return f"{value!r} looks like an IPv4 address but {', '.join(bad)} is not an octet (0-255)"
    try:
        validate_host(value, allow_ipv6=True)
    except BadInput as e:
        return str(e)
    try:
        unspecified = ipaddress.ip_address(value).is_unspecified
    except ValueError:
        unspecified = False
    if unspecified:  # a bind-to-all address: Linux connects it to the local host, so every node dials itself
        return (f"{value!r} is the unspecified (bind-to-all) address, not an address to connect to: "
                "each node would connect to itself")
    return ""


def _did_you_mean_ip(value: str) -> str:
    """`1720.30.23.101` -> `172.30.23.101`: drop one digit from an over-long octet."""
    parts = value.split(".")
    for i, p in enumerate(parts):
        if p.isdecimal() and int(p) > 255:  # isdigit() takes "²", which int() refuses
            for j in range(len(p)):
                cand = p[:j] + p[j + 1:]
                if cand and int(cand) <= 255 and not (len(cand) > 1 and cand[0] == "0"):
                    return ".".join(parts[:i] + [cand] + parts[i + 1:])
    return ""


@check("DD801", "MASTER_ADDR / MASTER_PORT are well-formed", category="env", tags={"network", "smoke"}, timeout=2, context=EnvContext)
def master_vars_wellformed(ctx):
    """## What it checks
    `MASTER_ADDR` is a hostname or IP address (an "address" like `1720.30.23.101` is caught),
    `MASTER_PORT` an integer in 1-65535, and both agree with the `--master`/`--port` being probed.

    ## Why it matters
    `env://` initialisation and the static rendezvous read these two variables; a malformed value
    surfaces as `ValueError`, `gaierror` or a connect timeout minutes later.

    ## Fix
    Export a valid address and port: `MASTER_ADDR=node1 MASTER_PORT=29500`.
    """
    env = ctx.env
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if addr is not None:
        prob = _host_problem(addr)
        if prob:
            guess = _did_you_mean_ip(addr)
            yield Finding(Severity.ERROR, f"MASTER_ADDR={addr!r}: {prob}",
                          fix=Fix(f"set MASTER_ADDR to the master's address{f' (did you mean {guess}?)' if guess else ''}",
                                  env={"MASTER_ADDR": guess} if guess else {}),
                          evidence={"MASTER_ADDR": addr}, kind="bad-addr")
        elif getattr(ctx, "master", None) and addr != ctx.master:
            yield Finding(Severity.WARNING, f"MASTER_ADDR={addr!r} differs from the master probed here ({ctx.master!r})",
                          hint="the job will use MASTER_ADDR; probe that host, or fix the variable",
                          fix=Fix("probe the master the job will use", (f"ddpdoctor network --master {addr}",)), kind="addr-differs")
    if port is not None:
        try:
            p = validate_port(port)
        except BadInput as e:
            yield Finding(Severity.ERROR, f"MASTER_PORT={port!r}: {e}", fix=Fix("set MASTER_PORT to a free port in 1-65535",
                                                                                env={"MASTER_PORT": "29500"}), kind="bad-port")
        else:
            if getattr(ctx, "port", None) and p != ctx.port:
                yield Finding(Severity.WARNING, f"MASTER_PORT={p} differs from the port probed here ({ctx.port})",
                              fix=Fix("probe the port the job will use", (f"ddpdoctor network --port {p}",)), kind="port-differs")


def _int_var(env, name, findings) -> int | None:
    v = env.get(name)
    if v is None:
        return None
    try:
        n = int(v)
    except ValueError:
        findings.append(Finding(Severity.ERROR, f"{name}={v!r} is not an integer",
                                fix=Fix(f"set {name} to a non-negative integer or unset it"), kind="not-int"))
        return None
    if n < 0:
        findings.append(Finding(Severity.ERROR, f"{name}={n} is negative", fix=Fix(f"set {name} to >= 0"), kind="negative"))
        return None
    return n


@check("DD802", "rank variables are consistent", category="env", tags={"network", "smoke"}, timeout=2, context=EnvContext)
def rank_vars_consistent(ctx):
    """## What it checks
    `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `NODE_RANK`/`GROUP_RANK`: integers,
    `RANK < WORLD_SIZE`, `LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE`, and `RANK` set whenever
    `WORLD_SIZE` is.

    ## Why it matters
    A rank outside the world, or two nodes with the same node rank, makes `init_process_group`
    wait for ranks that never come: the job hangs instead of failing.

    ## Fix
    Let the launcher set them (torchrun, srun) instead of exporting them by hand; give every node a
    unique `--node-rank` in `0..nnodes-1`.
    """
    out: list[Finding] = []
    env = ctx.env
    rank, world = _int_var(env, "RANK", out), _int_var(env, "WORLD_SIZE", out)
    lrank, lworld = _int_var(env, "LOCAL_RANK", out), _int_var(env, "LOCAL_WORLD_SIZE", out)
    for n in ("NODE_RANK", "GROUP_RANK"):
        _int_var(env, n, out)
    if world is not None and world == 0:
        out.append(Finding(Severity.ERROR, "WORLD_SIZE=0", fix=Fix("set WORLD_SIZE to the number of processes"), kind="zero-world"))
    if rank is not None and world is not None and world > 0 and rank >= world:
        out.append(Finding(Severity.ERROR, f"RANK={rank} is outside WORLD_SIZE={world} (ranks are 0..{world - 1})",
                           fix=Fix("give each process a rank in 0..WORLD_SIZE-1 (let torchrun set them)"), kind="rank-outside"))
    if world is not None and rank is None and "RANK" not in env:
        out.append(Finding(Severity.WARNING, f"WORLD_SIZE={world} is set but RANK is not",
                           fix=Fix("export RANK too, or let the launcher set both"), kind="rank-unset"))
    if lrank is not None and lworld is not None and lrank >= lworld:
        out.append(Finding(Severity.ERROR, f"LOCAL_RANK={lrank} is outside LOCAL_WORLD_SIZE={lworld}",
                           fix=Fix("LOCAL_RANK must be in 0..LOCAL_WORLD_SIZE-1"), kind="local-rank-outside"))
    if lworld is not None and world is not None and world > 0 and lworld > world:
        out.append(Finding(Severity.ERROR, f"LOCAL_WORLD_SIZE={lworld} exceeds WORLD_SIZE={world}",
                           fix=Fix("LOCAL_WORLD_SIZE counts processes on this node; it cannot exceed WORLD_SIZE"), kind="local-world-too-big"))
    yield from out


@check("DD803", "the rendezvous endpoint is well-formed", category="env", tags={"network", "smoke"}, timeout=2, context=EnvContext)
def rdzv_endpoint_wellformed(ctx):
    """## What it checks
    `PET_RDZV_ENDPOINT` (torchrun's `--rdzv-endpoint` given through the environment) and
    `PET_MASTER_ADDR`/`PET_MASTER_PORT` are `host[:port]` with a valid host and port.

    ## Why it matters
    torchrun parses the endpoint late; a typo such as `1720.30.23.101:29603` ends in a resolver
    error or a connect timeout on every node instead of a clear message.

    ## Fix
    Use `host:port` with the master's real address, e.g. `--rdzv-endpoint node1:29400`.
    """
    env = ctx.env
    ep = env.get("PET_RDZV_ENDPOINT")
    if ep:
        v6 = _ipv6_endpoint_problem(ep)
        if v6:
            yield v6
            if v6.severity >= Severity.ERROR:
                ep = ""  # judged: the generic parse below would only repeat it
            else:  # ambiguous but usable: judge the host torchrun will read (`:::` reads `::`, bind-to-all)
                host = torchrun_endpoint(ep)[0]
                prob = _host_problem(host)
                if prob:
                    yield Finding(Severity.ERROR, f"PET_RDZV_ENDPOINT={ep!r}: torchrun reads host {host!r}: {prob}",
                                  fix=Fix("use [address]:port with the master's reachable address"), kind="bad-host")
                ep = ""
    if ep:
        host, _, port = ep.rpartition(":") if not ep.startswith("[") else (ep[1:ep.find("]")], ":", ep[ep.find("]") + 2:])
        if not host:  # no colon: a bare host, the port defaults to 29400
            host, port = ep, ""
        if ep.endswith(":"):
            yield Finding(Severity.ERROR, f"PET_RDZV_ENDPOINT={ep!r}: the port after ':' is empty",
                          fix=Fix("use host:port, e.g. node1:29400"), kind="empty-port")
        prob = _host_problem(host)
        if prob:
            guess = _did_you_mean_ip(host)
            yield Finding(Severity.ERROR, f"PET_RDZV_ENDPOINT={ep!r}: {prob}",
                          fix=Fix(f"use host:port with the master's address{f' ({guess}:{port})' if guess else ''}",
                                  env={"PET_RDZV_ENDPOINT": f"{guess}:{port}"} if guess and port else {}), kind="bad-endpoint")
        if port:
            try:
                validate_port(port)
            except BadInput as e:
                yield Finding(Severity.ERROR, f"PET_RDZV_ENDPOINT={ep!r}: {e}", fix=Fix("use a port in 1-65535"), kind="bad-port")
    for name in ("PET_MASTER_ADDR",):
        v = env.get(name)
        if v and _host_problem(v):
            yield Finding(Severity.ERROR, f"{name}={v!r}: {_host_problem(v)}", fix=Fix(f"set {name} to the master's address"), kind="bad-master")
    v = env.get("PET_MASTER_PORT")
    if v:
        try:
            validate_port(v)
        except BadInput as e:
            yield Finding(Severity.ERROR, f"PET_MASTER_PORT={v!r}: {e}", fix=Fix("use a port in 1-65535"), kind="bad-port")


def torchrun_endpoint(endpoint: str, default_port: int = 29400) -> tuple[str, str]:
    """(host, port text) as torch's parse_rendezvous_endpoint splits an endpoint
    (torch/distributed/elastic/rendezvous/utils.py): whole when it is `[...]`, else at the LAST colon;
    one pair of brackets is then removed from the host."""
    ep = endpoint.strip()
    if ep.startswith("[") and ep.endswith("]"):
        host, rest = ep, ""
    else:
        host, _, rest = ep.rpartition(":") if ":" in ep else (ep, "", "")
    if len(host) > 1 and host[0] == "[" and host[-1] == "]":
        host = host[1:-1]
    return host, rest or str(default_port)


def _ipv6_endpoint_problem(ep: str) -> Finding | None:
    """Endpoints with IPv6 literals that torchrun misreads or refuses; None when there is none."""
    from ddpdoctor.validate import endpoint_text, ipv6_literal
    host, port = torchrun_endpoint(ep)
    bare = ep.strip()
    if "%" in bare:
        addr = bare.strip("[]").split("]")[0]
        return Finding(Severity.ERROR, f"PET_RDZV_ENDPOINT={ep!r}: torchrun refuses a scope id ('%'), so a link-local "
                       "address cannot be the rendezvous endpoint",
                       fix=Fix("use the master's name or a global/ULA address of it"),
                       evidence={"endpoint": ep, "address": addr}, kind="scope-id")
    if bare.startswith("[") or bare.count(":") < 2:
        return None
    lit = ipv6_literal(bare)
    if lit is not None and host != str(lit) and ipv6_literal(host) is None:
        good = endpoint_text(bare, 29400)
        return Finding(Severity.ERROR, f"PET_RDZV_ENDPOINT={ep!r}: torchrun splits at the last colon and reads host "
                       f"{host!r} port {port}: an IPv6 address needs brackets",
                       fix=Fix(f"write it as {good}", env={"PET_RDZV_ENDPOINT": good}),
                       evidence={"endpoint": ep, "torchrun_host": host, "torchrun_port": port}, kind="unbracketed-ipv6")
    if ipv6_literal(host) is not None:
        good = endpoint_text(host, int(port)) if port.isdigit() else endpoint_text(host)
        return Finding(Severity.WARNING, f"PET_RDZV_ENDPOINT={ep!r} is ambiguous: torchrun reads host {host} port {port}"
                       + (f", but {bare} is also an IPv6 address by itself" if lit is not None else ""),
                       fix=Fix(f"write it as {good}", env={"PET_RDZV_ENDPOINT": good}),
                       evidence={"endpoint": ep, "torchrun_host": host, "torchrun_port": port}, kind="ambiguous")
    return None


def suggest_name(name: str) -> str | None:
    """The known variable `name` was probably meant to be, or None."""
    if name in KNOWN:
        return None
    if not name.startswith(WATCHED_PREFIXES) and not any(
            difflib.SequenceMatcher(None, name, k).ratio() >= 0.9 for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    close = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.8)
    return close[0] if close else None


@check("DD804", "no misspelled NCCL_/GLOO_/TORCH_ variables", category="env", tags={"network", "smoke", "prolog"}, timeout=2, context=EnvContext)
def no_misspelled_vars(ctx):
    """## What it checks
    Every environment variable that looks like one torch, torchrun, Gloo or NCCL reads (same
    prefix, close spelling) is spelled exactly as they expect; a did-you-mean names the real one.

    ## Why it matters
    NCCL, Gloo and torch ignore unknown variables silently: `NCCL_SOCKET_INAME=eth0` leaves NCCL
    choosing its own interface, and the fix the user believes applied never is.

    ## Fix
    Rename the variable to the suggested name (and unset the misspelled one).
    """
    for name in sorted(ctx.env):
        good = suggest_name(name)
        if good and good not in ctx.env:
            val = ctx.env[name]
            yield Finding(Severity.WARNING, f"{name} is not a variable anything reads; did you mean {good}?",
                          hint=f"{name}={val!r} is silently ignored",
                          fix=Fix(f"rename it to {good}", (f"unset {name}",), {good: val}),
                          evidence={"name": name, "suggestion": good})
