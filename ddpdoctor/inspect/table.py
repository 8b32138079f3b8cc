"""The per-rank "where" table printed above the verdict: facts only, no judgement."""
from __future__ import annotations


def where_table(facts) -> str:
    lines = [f"job {facts.job} on {facts.host}: {len(facts.ranks)} rank(s), samples {facts.interval:.1f} s apart"]
    nodes = getattr(facts, "nodes", None) or []
    for n in nodes:  # --gather: one line per node that has nothing to show in the rank lines
        if not n.get("reported"):
            lines.append(f"  {n['node']}: did not report")
        elif n.get("error"):
            lines.append(f"  {n['node']}: {n['error']}")
    for r in sorted(facts.ranks, key=lambda r: r["rank"]):
        s = r["samples"][-1]
        if not s.get("ok"):
            where = f"? ({s.get('error') or 'no stack'})"
        else:
            w = s["where"]
            call = f"{w['call']} " if w["call"] and w["kind"] != "python" else ""
            where = f"{call}at {w['file']}:{w['line']} in {w['func']}"
        moved = "moving" if all(x.get("ok") for x in r["samples"]) and r["samples"][0]["signature"] != s["signature"] else "same"
        cpu = "" if r.get("main_thread_cpu") is None else f" cpu {r['main_thread_cpu']:.0%}"
        at = f" {r.get('node') or r.get('host')}" if nodes else ""
        lines.append(f"  rank {r['rank']:>3}{at} pid {r['pid']:>7} [{r['state']}] {moved:6}{cpu:9} {where}")
    return "\n".join(lines)
