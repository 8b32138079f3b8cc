"""The first node's part of `ddpdoctor cluster` after the checks: the report's `cluster` section, the
passing_nodes / failing_nodes lists and the HTML heatmap (cli/cluster.py only parses and calls these)."""
from __future__ import annotations

import os
from typing import Any, Sequence

from ddpdoctor.model import CheckResult, Report
from ddpdoctor.streams import atomic_write


def build_report(view, results: Sequence[CheckResult], *, launch, opts, out_dir: str, html_path: str | None,
                 duration_s: float) -> Report:
    """The cluster report; writes the node lists (and the heatmap) on the way, naming them in it."""
    passing, failing = view.label(view.passing()), view.label(view.failing())
    files, file_error = write_lists(out_dir, passing, failing)
    html = None
    if html_path:
        html = {"path": html_path, "error": write_heatmap(html_path, view, failing=view.failing())}
    pv = view.pairing
    extra: dict[str, Any] = {"cluster": {
        "files_error": file_error, "html": html, "missing_label": view.label(view.missing),
        "pairing_labels": {k: view.label(getattr(pv, k)) for k in ("bad", "slow", "inconclusive")} if pv else None,
        "summary": view.summary(),
        "mode": launch.mode, "nodes": view.names, "port": opts.port, "store": view.store,
        "missing": [view.names[i] for i in view.missing], "passing": passing, "failing": failing,
        "files": list(files), "max_peers": opts.max_peers, "seed": opts.seed,
        "fingerprint": view.majority_fingerprint(), "strategy": "pairs" if opts.pairs(launch.world) else "matrix",
        "pairing": pv.to_wire() if pv else None,
        "matrix": view.matrix(),
        "timing": {view.names[i]: view.timing(i) for i in sorted(view.records)},
        "incoming_first_node": view.incoming}}
    return Report("cluster", view.hostname, tuple(results), duration_s, extra=extra)


def write_lists(out_dir: str, passing: str, failing: str) -> tuple[tuple[str, ...], str]:
    """passing_nodes and failing_nodes (Slurm hostlists) in out_dir; the paths, or '' and why not."""
    paths = (os.path.join(out_dir, "passing_nodes"), os.path.join(out_dir, "failing_nodes"))
    for path, value in zip(paths, (passing, failing)):
        err = atomic_write(path, value + "\n" if value else "")
        if err:
            return (), err
    return paths, ""


def write_heatmap(path: str, view, *, failing) -> str:
    """Write `view`'s matrix as an HTML heatmap to `path`; '' or why it could not."""
    from ddpdoctor.render.heatmap import heatmap_html

    def tip(i, j):
        p = view.probe(i, j)
        r = p.rdzv if p is not None else None
        return f"{r.state} {r.ms} ms".strip() if r else ""

    page = heatmap_html(view.names, view.cell, title=f"ddpdoctor cluster: {view.world} nodes, port {view.port}",
                        subtitle=f"failing: {view.label(failing) or 'none'}", failing=failing, tooltip=tip)
    return atomic_write(path, page)
