"""`inspect`'s per-rank "where" table, printed above the verdict: the sampled facts in
(`extra`: job, ranks, interval_s, nodes), text out; no judgement."""
from __future__ import annotations

from ddpdoctor.model import Report


def where_table(facts) -> str:
    """The table from the facts inspect gathered (ddpdoctor/inspect/sample.py)."""
    return "\n".join(_table(facts.job, facts.host, facts.ranks, facts.interval, facts.nodes, facts.jobs, facts.chosen))


def lines(report: Report) -> list[str]:
    x = report.extra
    return _table(x.get("job"), report.host, x.get("ranks") or [], x.get("interval_s") or 0.0, x.get("nodes") or [],
                  x.get("jobs") or [], x.get("chosen") or "")


def _jobs_lines(job, jobs, chosen: str, many: bool) -> list[str]:
    """The job judged and why, its launcher's notes, and every other job found (none dropped silently);
    `many`: --gather, the jobs come from several nodes."""
    out = []
    others = [j for j in jobs if j["job"] != job]
    if others:
        out.append(f"  judged: {chosen}")
    for j in jobs:
        if j["job"] == job:
            out += [f"  note{' on ' + j['host'] if many and j.get('host') else ''}: {n}" for n in j.get("notes") or []]
    seen = set()
    for j in others:
        if (j["job"], j.get("host")) in seen:
            continue
        seen.add((j["job"], j.get("host")))
        agents = ", ".join(f"{a['kind']} pid {a['pid']}" for a in j.get("agents") or [])
        pid = next((r["pid"] for r in j.get("ranks") or []), None) or next((a["pid"] for a in j.get("agents") or []), None)
        host = f" on {j['host']}" if many and j.get("host") else ""
        if not j.get("ranks"):  # a launcher between two generations of workers, or ending
            out.append(f"  also{host}: {agents} with no live worker")
            continue
        out.append(f"  also{host}: job {j['job']}, {len(j['ranks'])} rank(s)"
                   + (f" started by {agents}" if agents else "") + (f": ddpdoctor inspect --pid {pid}" if pid else ""))
    return out


def _table(job, host: str, ranks, interval: float, nodes, jobs=(), chosen: str = "") -> list[str]:
    lines = [f"job {job} on {host}: {len(ranks)} rank(s), samples {interval:.1f} s apart"]
    lines += _jobs_lines(job, jobs, chosen, bool(nodes))
    for n in nodes:  # --gather: one line per node that has nothing to show in the rank lines
        if not n.get("reported"):
            lines.append(f"  {n['node']}: did not report")
        elif n.get("error"):
            lines.append(f"  {n['node']}: {n['error']}")
    for r in sorted(ranks, key=lambda r: r["rank"]):
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
    return lines
