"""`ddpdoctor watch`: run beside a job until it ends and print one line per event as it happens.

Never imports torch (a debug server's address comes from /proc or the job's TCPStore read over a plain
socket, probes/workerserver.py; torch's own store client only for a store that speaks another protocol);
only looks (/proc, py-spy --nonblocking, the debug server's read-only handlers): the job is never paused,
signalled or changed.
"""
from __future__ import annotations

import os
import sys

import click

from ddpdoctor.cli.common import FiniteFloat, write_stdout
from ddpdoctor.validate import BadInput


@click.command("watch")
@click.option("--pid", type=int, metavar="PID", help="Any process of the job (a rank, or torchrun above them).")
@click.option("--json", "json_out", is_flag=True, help="One JSON object per event per line on stdout.")
@click.option("--deadline", type=FiniteFloat(1, 30 * 86400), metavar="SECONDS",
              help="Stop watching after this many seconds (default: when the job ends).")
@click.option("--gather", is_flag=True,
              help="Under srun, one task per node: every node's view meets on the first node, one verdict.")
@click.option("--gather-port", type=click.IntRange(1, 65535), default=29404, show_default=True,
              help="With --gather: the TCP port the first node listens on.")
@click.option("--wait", "wait_s", type=FiniteFloat(0, 3600), default=0.0, show_default=True,
              help="Seconds to wait for the job's ranks to appear (started beside a launch).")
@click.option("--events", "events_file", metavar="FILE",
              help="Also append every event (JSON lines) here (default: the armed job's directory, if any).")
@click.option("--debug-server/--no-debug-server", "debug_server", default=None,
              help="Read each rank's collective sequence numbers from torch's debug server (the job called "
                   "torch.distributed.debug.start_debug_server()). Default: when a rank runs one. Given and "
                   "no rank runs one: one line on stderr says so, and watch goes on without them.")
def watch(pid, json_out, deadline, gather, gather_port, wait_s, events_file, debug_server):
    """Name the rank that hangs or lags while the job runs; stop when it ends.

    \b
    ddpdoctor watch                    the torch.distributed job on this node
    ddpdoctor watch --pid 4121         the job this process belongs to
    srun --jobid <id> --overlap -N <n> --ntasks-per-node 1 ddpdoctor watch --gather
                                       every node of a Slurm job, one verdict on the first node
    ddpdoctor run --watch -- torchrun ...   launch and watch

    Events: hang (the origin rank and what it does, the collective the others wait in), straggler,
    recovered, rank gone, and a summary at the end. Exit 0 when the job ended without a hang, a
    straggler or a failed rank, 1 when one happened, 2 on bad usage.
    """
    if pid is not None and pid <= 0:
        raise BadInput(f"--pid {pid}: want a positive process id")
    if gather and pid is not None:
        raise BadInput("--pid names a process of one node; --gather finds the job on every node by itself")
    if events_file is not None:
        d = os.path.dirname(os.path.abspath(events_file))
        if not os.path.isdir(d) or not os.access(d, os.W_OK):
            raise BadInput(f"--events {events_file}: its directory is not writable")
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # SIGINT is how watch is stopped (Ctrl-C, `run --watch` at the job's end, the lab). Started from a
        # script's `cmd &`, bash hands it SIGINT ignored and it could then only be killed, without its summary.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    ds_mode = {None: "auto", True: "on", False: "off"}[debug_server]
    from ddpdoctor.probes import pyspy
    if pyspy.binary() is None:
        raise BadInput("py-spy is not installed: pip install py-spy")

    from ddpdoctor.render.watch import line, to_json

    def emit(e):
        write_stdout((to_json(e) if json_out else line(e)) + "\n")

    if gather:
        from ddpdoctor.watch.gather import run_gather
        sys.exit(run_gather(emit, port=gather_port, deadline=deadline, wait_s=wait_s, events_file=events_file,
                            debug_server=ds_mode))
    from ddpdoctor.watch import loop
    src = _local_source(pid, wait_s, ds_mode)
    path = events_file or loop.events_path(r.env for r in src.ranks.values())
    sys.exit(loop.run(src, emit, deadline=deadline, events_file=path))


def _local_source(pid, wait_s, debug_server="auto"):
    import time

    from ddpdoctor.watch.observe import NodeView
    from ddpdoctor.watch.ranks import NoJob
    end = time.monotonic() + wait_s
    while True:
        try:
            return NodeView(pid, debug_server=debug_server)
        except NoJob as e:
            if time.monotonic() >= end:
                raise BadInput(str(e)) from None  # inspect's pick_job words the ptrace case itself
            if pid is not None and not os.path.exists(f"/proc/{pid}"):
                raise BadInput(f"--pid {pid}: no such process") from None
            time.sleep(0.5)
