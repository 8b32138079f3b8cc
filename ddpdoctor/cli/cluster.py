"""`ddpdoctor cluster`: the whole allocation at once, under srun (or torchrun, one process per node).

    srun -N 4 --ntasks-per-node=1 ddpdoctor cluster
    srun --exclude=$(cat failing_nodes) ...      # the next job, without the nodes it named

Every node probes its peers; the first node prints the reachability matrix, the findings of the
DD71x checks and writes `passing_nodes` / `failing_nodes` (Slurm hostlists). The other nodes print
nothing unless they cannot take part. torch is imported only for c10d's TCPStore.
"""
from __future__ import annotations

import json
import os
import sys
import time

import click

from ddpdoctor.cli.common import FINITE
from ddpdoctor.validate import BadInput, validate_port, validate_seconds

DEFAULT_PORT = 29400


def _default_port() -> int:
    try:
        return validate_port(os.environ.get("DDPDOCTOR_CLUSTER_PORT") or DEFAULT_PORT)
    except BadInput:
        return DEFAULT_PORT


@click.command("cluster")
@click.option("--port", metavar="PORT",
              help=f"Rendezvous port every node listens on and probes. Default: {DEFAULT_PORT} (torchrun: MASTER_PORT+1).")
@click.option("--store-port", metavar="PORT", help="Port of the TCPStore on the first node (srun). Default: PORT+1.")
@click.option("--deadline", type=FINITE, default=30.0, show_default=True,
              help="Seconds until the first node reports; a node that has not reported by then is named missing.")
@click.option("--probe-timeout", type=FINITE, default=2.0, show_default=True, help="Seconds one lookup or connect may take.")
@click.option("--max-peers", type=click.IntRange(1, 4096), default=16, show_default=True,
              help="Peers each node probes: all of them up to this many, else ring neighbours, the first node and a sample.")
@click.option("--seed", type=int, default=None, help="Seed of the peer sample (default: the job id).")
@click.option("--out-dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Where the first node writes passing_nodes and failing_nodes.")
@click.option("--config", "config_path", metavar="FILE", help="Site configuration for the node checks (default /etc/ddpdoctor.toml).")
@click.option("--json", "json_out", is_flag=True, help="The first node prints only the JSON report.")
@click.option("-v", "--verbose", is_flag=True, help="Informational findings in full.")
@click.option("--strategy", type=click.Choice(["auto", "matrix", "pairs"]), default="auto", show_default=True,
              help="matrix: every node probes up to --max-peers others; pairs: two pairing rounds name the bad "
                   "nodes with O(1) tests per node; auto: pairs above 32 nodes.")
@click.option("--html", "html_path", metavar="FILE", help="The first node also writes the matrix as an HTML heatmap.")
@click.option("--reference", "reference_path", metavar="FILE",
              help="JSON fingerprint the nodes must match (DD720); default: the majority of the nodes.")
def cluster(port, store_port, deadline, probe_timeout, max_peers, seed, out_dir, config_path, json_out, verbose,
            html_path=None, reference_path=None, strategy="auto"):
    """Reachability matrix, name resolution and version drift across every node of an allocation.

    \b
    srun -N 8 --ntasks-per-node=1 ddpdoctor cluster
    torchrun --nnodes=8 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=node1:29500 -m ddpdoctor cluster

    Exit 0 when every node reported and every pair connects; 1 otherwise (on the first node).
    """
    from ddpdoctor.cli.common import emit
    from ddpdoctor.cluster import launch as cl_launch
    from ddpdoctor.cluster import node as cl_node
    from ddpdoctor.facts.cluster import ClusterView
    from ddpdoctor.slurm.prolog import process_age as _process_age

    started = time.monotonic() - _process_age()
    port_n = validate_port(port) if port is not None else None
    store_n = validate_port(store_port) if store_port is not None else ((port_n or _default_port()) % 65535) + 1
    deadline = validate_seconds(deadline, "--deadline", minimum=2, maximum=3600)
    probe_timeout = validate_seconds(probe_timeout, "--probe-timeout", maximum=60)
    reference = _read_reference(reference_path) if reference_path else None
    launch = cl_launch.detect_launch(os.environ, store_port=store_n)
    if port_n is None:
        # under torchrun the agent's store holds MASTER_PORT on the first node: probe the next port
        port_n = (launch.store_port % 65535) + 1 if launch.mode == "torchrun" else _default_port()
    if port_n == launch.store_port:
        raise BadInput(f"--port {port_n} is the store's port; pick another")
    if not launch.representative:
        sys.exit(0)  # another task on this node speaks for it
    if seed is None:
        digits = "".join(ch for ch in launch.run_id if ch in "0123456789")  # "²".isdigit(), yet int("²") fails
        seed = int(digits[:9]) if digits else 0
    opts = cl_node.Options(port=port_n, store_port=store_n, deadline=deadline, probe_timeout=probe_timeout,
                      max_peers=max_peers, seed=seed, config_path=config_path, strategy=strategy)
    run = cl_node.run_node(launch, opts, started=started)
    if launch.index != 0:
        if run.error:
            click.echo(f"ddpdoctor cluster: {launch.node} could not take part: {run.error}", err=True)
            sys.exit(1)
        sys.exit(0)
    if run.error and not run.gathered:
        click.echo(f"ddpdoctor cluster: the first node ({launch.node}) could not gather: {run.error}", err=True)
        sys.exit(1)

    from ddpdoctor import registry, runner
    from ddpdoctor.cluster.report import build_report

    view = ClusterView(run.gathered, launch.world, names=launch.names, port=port_n,
                       store=f"{launch.store_host}:{store_n}", elapsed_s=time.monotonic() - started,
                       reference=reference)
    results = runner.run_checks(registry.select("cluster"), view, deadline=10)
    report = build_report(view, results, launch=launch, opts=opts, out_dir=out_dir, html_path=html_path,
                          duration_s=time.monotonic() - started)
    emit(report, json_out=json_out, verbose=verbose)


def _read_reference(path: str) -> dict[str, str]:
    """A fingerprint file: a JSON object of strings (plain data; nothing in it is executed)."""
    from ddpdoctor.readfile import read_limited
    try:  # a fingerprint is kilobytes: a FIFO, /dev/zero or a huge file is one line, never a wait
        data = json.loads(read_limited(path, 1 << 20))
    except (OSError, ValueError, RecursionError) as e:
        raise BadInput(f"--reference {path}: {getattr(e, 'strerror', None) or e}") from None
    if isinstance(data, dict) and isinstance(data.get("cluster"), dict) and "fingerprint" in data["cluster"]:
        data = data["cluster"]["fingerprint"]  # a saved `cluster --json` report
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in data.items()):
        raise BadInput(f"--reference {path}: want a JSON object of key -> version/value strings")
    return {k: str(v) for k, v in data.items()}
