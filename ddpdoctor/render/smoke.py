"""The smoke report's own sections: the per-rank table, the bandwidth table, the hung-rank table,
the --fix line and the failed ranks' output. A finished Report in (its JSON `extra` and DD501's
findings), text out; no judgement: which ranks hold the others up is DD501's evidence (`held_up_by`).
"""
from __future__ import annotations

import re

from typing import Any, Mapping

from ddpdoctor.facts import bandwidth as bw
from ddpdoctor.facts.gpu import misplaced, rank_usage
from ddpdoctor.facts.smoke import RankRecord
from ddpdoctor.model import Report
from ddpdoctor.units import MiB, fmt_bytes, fmt_ranks


def _own_gpu_mem(rec: RankRecord) -> str:
    g = rec.gpu
    if g is None or not g.available:
        return "-"
    own = g.expected.get("uuid")
    return ", ".join(f"GPU {u['gpu']}: {u['used'] / MiB:.0f} MiB" + ("" if u["uuid"] == own else " (not its own)")
                     for u in rank_usage(rec)) or "none"


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.2f}s" if s >= 0.1 else f"{s * 1e3:.0f}ms"


def _rank_busbw(rec: RankRecord, world_size: int) -> str:
    entries = rec.bandwidth
    if not entries or world_size < 2:
        return "-"
    e = max(entries, key=lambda x: x["size"])
    return f"{bw.busbw('all_reduce', e['size'], bw.median(e['times']), world_size):.2f} GB/s"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def held_up_by(report: Report) -> list[int] | None:
    """The ranks DD501 found holding the others up (None: DD501 did not say, e.g. --ignore DD501)."""
    for r in report.results:
        if r.id == "DD501":
            for f in r.findings:
                if "held_up_by" in f.evidence:
                    return list(f.evidence["held_up_by"])
    return None


def rank_table(ranks: list[RankRecord], world_size: int) -> list[str]:
    rows = [["rank", "host", "local", "device", "import", "init", "collectives", "bandwidth", "busbw", "correct",
             "GPU memory"]]
    for rec in ranks:
        ph = rec.phases
        ok = sum(1 for e in rec.correctness if e.ok)
        state = "error" if rec.error else f"{ok}/{len(rec.correctness)}"
        rows.append([str(rec.rank), rec.host, "?" if rec.local_rank is None else str(rec.local_rank), rec.device,
                     _secs(ph.get("import torch")), _secs(ph.get("init")), _secs(ph.get("correctness")),
                     _secs(ph.get("bandwidth")), _rank_busbw(rec, world_size), state, _own_gpu_mem(rec)])
    return _table(rows)


def hung_ranks(verdict: Mapping[str, Any], held: list[int] | None) -> list[str]:
    """What every rank was doing when the watchdog stopped the run."""
    if held is None:
        who = "see DD501"
    else:
        who = f"ranks {fmt_ranks(held)}" if held else "none, all wait in one collective"
    lines = [f"progress when {verdict['detected_by']} stopped the run ({verdict['after_s']} s; holding the others up: "
             f"{who})"]
    rows = [["rank", "host", "pid", "phase", "in phase", "heartbeat age", "state"]]
    for st in verdict["states"]:
        if not st.get("seen"):
            what = "not seen by rank 0 yet" if st.get("relayed") else "never connected"
            rows.append([str(st["rank"]), str(st.get("host", "?")), str(st.get("pid", "?")), what, "-", "-",
                         st.get("proc_state") or ""])
            continue
        state = st.get("exit") or st.get("proc_state") or ""
        if st.get("error"):
            state = (state + "; " if state else "") + "error"
        rows.append([str(st["rank"]), str(st.get("host", "?")), str(st.get("pid", "?")), str(st.get("phase", "?")),
                     f"{st.get('in_phase_s', 0):.1f}s", f"{st.get('heartbeat_age_s', 0):.1f}s"
                     + (f" ({st.get('relay_age_s', 0):.1f}s ago, via rank 0)" if st.get("relayed") else ""), state])
    return lines + _table(rows)


def lines(report: Report) -> list[str]:
    """The smoke sections of the text report, in order."""
    x = report.extra
    if "world_size" not in x:
        return []  # the run never got as far as a world (bad input, a launcher error)
    world_size = x.get("world_size") or 0
    ranks = [RankRecord.from_dict(d) for d in x.get("ranks") or []]
    out = [f"{world_size} rank(s), backend {x.get('backend') or 'not agreed yet'}, launcher {x.get('launcher')}"]
    if ranks:
        out += [""] + rank_table(ranks, world_size)
    if x.get("bandwidth"):
        its = sorted({len(e["times"]) for rec in ranks for e in rec.bandwidth})
        out += ["", f"all_reduce bandwidth (nccl-tests definitions; median of {'/'.join(map(str, its))} iterations "
                    "after warm-up, slowest rank)"]
        rows = [["size", "time", "algbw", "busbw"]]
        for row in x["bandwidth"]:
            rows.append([fmt_bytes(row["size"]), f"{row['time_s'] * 1e3:.3f} ms", f"{row['algbw_gbps']:.3f} GB/s",
                         f"{row['busbw_gbps']:.3f} GB/s"])
        out += _table(rows)
    elif world_size == 1 and any(rec.bandwidth for rec in ranks):
        out += ["", "all_reduce bandwidth: needs two or more ranks (with one rank all_reduce moves no data)"]
    if x.get("verdict"):
        out += [""] + hung_ranks(x["verdict"], held_up_by(report))
    fix_ranks = (x.get("fix") or {}).get("ranks") or []
    if fix_ranks:
        moved = misplaced({d["rank"]: RankRecord.from_dict(d) for d in fix_ranks})
        out += ["", "--fix re-run (set_device before CUDA, device_id, device_ids, empty_cache): "
                    + ("memory still on another rank's GPU" if moved else "every rank's memory on its own GPU")]
    for r, tail in sorted((x.get("logs") or {}).items(), key=lambda kv: int(kv[0])):
        said = [line for line in tail or () if not _CONTENT_FREE.match(line)]
        if said:  # a heading over nothing (or over bare `[rank0]:` prefixes) tells the user nothing
            out += ["", f"rank {r} output (last lines):"] + [f"  | {line}" for line in said[-8:]]
    return out


# a line with nothing to read: blank, terminal escapes only, or only the `[rankN]:` prefix torch's
# launcher and c10d's excepthook put before every line (torch/distributed/elastic/multiprocessing)
_CONTENT_FREE = re.compile(r"^(\s|\x1b\[[0-9;]*[A-Za-z]|\[(?:default|rank)\d*\]:)*$")


def text(report: Report) -> str:
    return "\n".join(lines(report))
