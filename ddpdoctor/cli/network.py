"""`ddpdoctor network`: rendezvous pre-flight from a worker (or the master), and `--listen` mode."""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import socket
import sys
import time

import click

from ddpdoctor.cli.common import FINITE, emit, report_options
from ddpdoctor.validate import BadInput, split_endpoint, validate_host, validate_port, validate_seconds

DEFAULT_PORT = 29400  # torchrun's c10d rendezvous default


def _default_port() -> int:
    try:
        return validate_port(os.environ.get("MASTER_PORT", DEFAULT_PORT))
    except BadInput:
        return DEFAULT_PORT  # DD801 reports the malformed variable


@click.command("network")
@click.option("--master", metavar="HOST[:PORT]", help="Master / rendezvous host (a name, IPv4, IPv6 `fd00::1` or "
              "`[fd00::1]:29400`). Default: $MASTER_ADDR, else this host.")
@click.option("--port", metavar="PORT", help=f"Rendezvous port. Default: $MASTER_PORT, else {DEFAULT_PORT}.")
@click.option("--listen", is_flag=True, help="Run on the master: answer workers' probes on PORT and on an ephemeral port.")
@click.option("--expect", type=int, metavar="N", help="With --listen: stop once N workers completed both probes.")
@click.option("--timeout", type=FINITE, default=60.0, show_default=True, help="With --listen: stop after this many seconds.")
@click.option("--probe-timeout", type=FINITE, default=2.0, show_default=True,
              help="Seconds one probe (connect, lookup) may take.")
@report_options
def network(master, port, listen, expect, timeout, probe_timeout, json_out, select, ignore, fail_on, deadline, verbose):
    """Check DNS, reachability, NIC choice and environment for a multi-node rendezvous.

    Run it on each worker with --master pointing at the rendezvous host, while the master runs
    `ddpdoctor network --listen`. Without --master it diagnoses this host as the master.
    """
    port_n = validate_port(port) if port is not None else _default_port()
    probe_timeout = validate_seconds(probe_timeout, "--probe-timeout", maximum=60)
    if listen:
        if expect is not None and expect < 1:
            raise BadInput(f"--expect {expect}: want at least 1 worker")
        _listen(port_n, expect, validate_seconds(timeout, "--timeout"), json_out)
        return
    if expect is not None:
        raise BadInput("--expect only makes sense with --listen")
    if master is not None:
        master, in_master = split_endpoint(master)  # node1, node1:29400, fd00::1, [fd00::1]:29400
        if in_master is not None:
            if port is not None and port_n != in_master:
                raise BadInput(f"--master gives port {in_master} and --port {port_n}: give one")
            port_n = in_master
    else:
        master = default_master_checked()

    from ddpdoctor import registry, runner
    from ddpdoctor.facts.network import NetworkFacts

    ctx = NetworkFacts(master, port_n, probe_timeout=probe_timeout)
    checks = registry.select("network", select=select, ignore=ignore)
    report = runner.run_report("network", ctx.hostname, checks, ctx, deadline=deadline,
                               fail_on_warning=fail_on == "warning",
                               extra={"master": master, "port": port_n})
    env = report.fix_env()
    if env and not json_out:
        report = dataclasses.replace(report, extra={**report.extra, "text": env_footer(env)})
    emit(report, json_out=json_out, verbose=verbose)


def env_footer(env) -> str:
    """Lines to paste: values shell-quoted (an interface may be named `a;b`, which Linux allows)."""
    lines = ["To apply the environment fixes on this host:"]
    lines += [f"  export {k}={shlex.quote(v)}" for k, v in env.items()]
    return "\n".join(lines)


def default_master_checked() -> str:
    from ddpdoctor.cli import default_master
    m = default_master()
    try:
        return validate_host(m)
    except BadInput:
        # A malformed MASTER_ADDR is itself a finding (DD801); probe this host meanwhile.
        return socket.gethostname()


def _listen(port: int, expect: int | None, timeout: float, json_out: bool) -> None:
    from ddpdoctor.checks.reachability import iptables_for
    from ddpdoctor.peerprobe.server import ListenError, listen

    from ddpdoctor.cli.common import write_stdout

    from ddpdoctor.checks.dns import shell_safe_name

    host = socket.gethostname()
    suggest = shell_safe_name(host) or "<this-host>"  # a hostname goes into a command below

    def _out(text: str = "") -> None:  # a reader that went away must not change the exit code
        write_stdout(text + "\n")

    def on_event(kind, w):
        if json_out:
            return
        if kind == "bulk":
            b = w.bulk[-1]
            _out(f"  {w.host} ({w.addr}) bulk probe: {b['bytes']} of {b['asked']} bytes arrived "
                 f"via {b['interface']} (MTU {b['mtu']})")
            return
        what = f"port {port}" if kind == "rendezvous" else "the ephemeral port"
        _out(f"  {w.host} ({w.addr}) reached {what} via {w.interface}")

    # SIGTERM (srun, timeout(1)) and SIGINT end the wait like the timeout does: sockets closed, and
    # the arrivals so far are still reported (text or JSON).
    stopped: list[str] = []

    def on_signal(signum, _frame):
        stopped.append(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        if not json_out:
            _out(f"ddpdoctor listening on {host}:{port}"
                       + (f", waiting for {expect} worker(s)" if expect else "") + f" for up to {timeout:g} s")
        res = listen(port, expect=expect, timeout=timeout, reply_host=host, on_event=on_event,
                     stop=lambda: stopped[0] if stopped else "")
    except ListenError as e:
        from ddpdoctor.probes.procs import listeners_on
        holders = listeners_on(port)
        who = "; ".join(f"pid {h.pid} ({h.name})" for h in holders if h.pid)
        msg = f"{e}{' by ' + who if who else ''}"
        if json_out:
            _out(json.dumps({"schema": 1, "command": "network-listen", "host": host, "exit_code": 1, "error": msg}))
        else:
            click.echo(f"✗ {msg}", err=True)  # stderr
        sys.exit(1)
    code = 0 if res.ok else 1
    partial = [w for w in res.workers if not w.complete]
    if json_out:
        _out(json.dumps({
            "schema": 1, "command": "network-listen", "host": host, "exit_code": code,
            "port": res.port, "eport": res.eport, "eport_range": list(res.eport_range), "expect": expect,
            "timed_out": res.timed_out, "interrupted": res.interrupted or None, "duration_s": round(res.duration_s, 3),
            "workers": [{"host": w.host, "addr": w.addr, "interface": w.interface,
                         "rendezvous_port": w.rdzv_at is not None, "ephemeral_port": w.eph_at is not None,
                         "bulk": w.bulk}
                        for w in res.workers]}, indent=2))
        sys.exit(code)
    done = sum(w.complete for w in res.workers)
    _out(f"{done} worker(s) reached both ports" + (f" of {expect} expected" if expect else "")
               + f" in {res.duration_s:.1f} s" + (" (timed out)" if res.timed_out else "")
               + (f" (stopped by {res.interrupted})" if res.interrupted else ""))
    for w in res.workers:  # a name is only what the peer says: the address is what we saw
        if w.complete:
            _out(f"✓ {w.host} from {w.addr} via {w.interface}")
    for w in partial:
        _out(f"✗ {w.host} from {w.addr} reached port {port} but not ephemeral port {res.eport}: "
                   f"a firewall passes the rendezvous port and drops {res.eport_range[0]}-{res.eport_range[1]}")
        _out(f"    fix: sudo {iptables_for(w.addr)} -I INPUT -p tcp -s {w.addr} "
                   f"--dport {res.eport_range[0]}:{res.eport_range[1]} -j ACCEPT")
    if expect and done < expect and not partial:
        _out(f"✗ {expect - done} worker(s) never arrived: run `ddpdoctor network --master {suggest} --port {port}` "
                   "on them; its report names what blocks them")
    elif not expect and not res.workers:
        _out(f"✗ no worker arrived: run `ddpdoctor network --master {suggest} --port {port}` on them")
    sys.exit(code)
