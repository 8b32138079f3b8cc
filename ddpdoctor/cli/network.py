"""`ddpdoctor network`: rendezvous pre-flight from a worker (or the master), and `--listen` mode."""
from __future__ import annotations

import os
import signal
import socket
import sys

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

    \b
    ddpdoctor network --listen --port 29400 --expect 2    on the master (node1), first
    ddpdoctor network --master node1 --port 29400         then on each worker (the master too, if you like)
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
    emit(report, json_out=json_out, verbose=verbose)


def default_master_checked() -> str:
    from ddpdoctor.cli import default_master
    m = default_master()
    try:
        return validate_host(m)
    except BadInput:
        # A malformed MASTER_ADDR is itself a finding (DD801); probe this host meanwhile.
        return socket.gethostname()


def _listen(port: int, expect: int | None, timeout: float, json_out: bool) -> None:
    from ddpdoctor.checks.dns import shell_safe_name
    from ddpdoctor.checks.reachability import iptables_for
    from ddpdoctor.cli.common import write_stdout
    from ddpdoctor.peerprobe.server import ListenError, listen
    from ddpdoctor.render import listen as show
    from ddpdoctor.render import json as rj

    host = socket.gethostname()
    suggest = shell_safe_name(host) or "<this-host>"  # a hostname goes into a command below

    def _out(text: str = "") -> None:  # a reader that went away must not change the exit code
        from ddpdoctor.render.safe import printable
        write_stdout((text if json_out else printable(text)) + "\n")  # peers name themselves: no raw ESC

    def on_event(kind, w):
        if not json_out:
            _out(show.arrival(kind, w, port))

    # SIGTERM (srun, timeout(1)) and SIGINT end the wait like the timeout does: sockets closed, and
    # the arrivals so far are still reported (text or JSON).
    stopped: list[str] = []

    def on_signal(signum, _frame):
        stopped.append(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        if not json_out:
            _out(show.banner(host, port, expect, timeout))
        res = listen(port, expect=expect, timeout=timeout, reply_host=host, on_event=on_event,
                     stop=lambda: stopped[0] if stopped else "")
    except ListenError as e:
        from ddpdoctor.probes.procs import listeners_on
        holders = listeners_on(port)
        who = "; ".join(f"pid {h.pid} ({h.name})" for h in holders if h.pid)
        msg = f"{e}{' by ' + who if who else ''}"
        if json_out:
            _out(rj.document({"schema": 1, "command": "network-listen", "host": host, "exit_code": 1, "error": msg},
                             indent=None))
        else:
            click.echo(f"✗ {msg}", err=True)  # stderr
        sys.exit(1)
    code = 0 if res.ok else 1
    if json_out:
        _out(rj.document(show.to_json(res, host=host, code=code, expect=expect)))
        sys.exit(code)
    # the verdict: who reached only the rendezvous port (a firewall drops the ephemeral range), who never came
    partial = [w for w in res.workers if not w.complete]
    lo, hi = res.eport_range
    fixes = [f"sudo {iptables_for(w.addr)} -I INPUT -p tcp -s {w.addr} --dport {lo}:{hi} -j ACCEPT" for w in partial]
    done = sum(w.complete for w in res.workers)
    missing = (expect - done if expect and done < expect and not partial
               else -1 if not expect and not res.workers else 0)
    for line in show.summary(res, port=port, expect=expect, partial=partial, partial_fix=fixes, missing=missing,
                             probe_cmd=f"ddpdoctor network --master {suggest} --port {port}"):
        _out(line)
    sys.exit(code)
