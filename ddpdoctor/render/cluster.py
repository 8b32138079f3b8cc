"""The cluster report's own sections: the reachability matrix (or, past MATRIX_MAX nodes, a summary),
the pairing rounds, the passing/failing node lists and the per-node timing. Report in (its
`extra["cluster"]`, docs/json-schema.md), text out; which nodes fail is the view's (facts/cluster.py)
and the DD71x checks' to say, not this module's.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ddpdoctor.facts.cluster import BOTH_FAIL, EPH_FAIL, NO_NAME, NOT_PROBED, OK, RDZV_FAIL, UNKNOWN, WRONG_HOST
from ddpdoctor.model import Report

CELL_TEXT = {OK: "✓", NOT_PROBED: "·", NO_NAME: "N", WRONG_HOST: "W", RDZV_FAIL: "R", EPH_FAIL: "E",
             BOTH_FAIL: "✗", UNKNOWN: "?"}
LEGEND = ("✓ both ports answer   R rendezvous port fails   E ephemeral port fails   ✗ both fail   "
          "N name does not resolve   W another host answers   · not probed   ? node never reported")


def matrix(names: Sequence[str], cells: Sequence[Sequence[str]], port: int) -> list[str]:
    """Row probes column; columns are numbered vertically so the matrix stays square."""
    n = len(names)
    w = len(str(n))
    width = max(len(x) for x in names) + w + 3
    lines = [f"reachability (row probes column) on port {port} and an ephemeral port:"]
    digits = [str(j + 1).rjust(w) for j in range(n)]
    for k in range(w):
        lines.append(" " * width + " ".join(d[k] for d in digits))
    for i in range(n):
        head = f"{str(i + 1).rjust(w)} {names[i]}".ljust(width)
        lines.append(head + " ".join(CELL_TEXT.get(c, c) for c in cells[i]))
    lines.append(LEGEND)
    return lines


def summary(nodes: int, s: Mapping[str, Any], missing: str) -> list[str]:
    lines = [f"{nodes} nodes: {s['probes']} probes ({s['pairs']} pairs), {s['failed']} failed; "
             f"missing: {missing or 'none'}"]
    lines += [f"  {name}: unreachable from {c} node(s)" for name, c in s.get("unreachable_from") or []]
    return lines


def lines(report: Report) -> list[str]:
    c = report.extra.get("cluster") or {}
    names = c.get("nodes") or []
    out = (matrix(names, c["matrix"], c.get("port", 0)) if c.get("matrix") and names
           else summary(len(names), c.get("summary") or {"probes": 0, "pairs": 0, "failed": 0}, c.get("missing_label", "")))
    out.append("")
    pv = c.get("pairing")
    if pv:
        lab = c.get("pairing_labels") or {}
        out.append(f"pairing: {len(pv['round1'])} pair tests in round 1, {len(pv['round2'])} in round 2; "
                   f"bad: {lab.get('bad') or 'none'}; slow: {lab.get('slow') or 'none'}"
                   + (f"; undecided: {lab['inconclusive']}" if lab.get("inconclusive") else ""))
    passing, failing, files = c.get("passing", ""), c.get("failing", ""), c.get("files") or []
    out.append(f"passing nodes: {passing or '(none)'}")
    out.append(f"failing nodes: {failing or '(none)'}")
    if files:
        out.append(f"written: {files[0]}, {files[1]}"
                   + (f"   (next job: srun --exclude=$(cat {files[1]}) ...)" if failing else ""))
    if c.get("files_error"):
        out.append(f"could not write the node lists: {c['files_error']}")
    if c.get("html"):
        h = c["html"]
        out.append(f"could not write {h['path']}: {h['error']}" if h.get("error") else f"heatmap: {h['path']}")
    slow = sorted(((t or {}).get("total_s", 0), name) for name, t in (c.get("timing") or {}).items())
    if slow:
        out.append(f"per node: median {slow[len(slow) // 2][0]:.2f} s, slowest {slow[-1][1]} {slow[-1][0]:.2f} s")
    return out
