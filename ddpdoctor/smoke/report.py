"""The world-wide report: rank 0's world data -> checks (DD4xx, DD5xx, DD8xx) -> Report + table.

No torch here: rank 0's worker sends plain data (records per rank, the watchdog's verdict), and
the judging happens in the supervisor, like every other ddpdoctor command.
"""
from __future__ import annotations

import socket
from typing import Any, Mapping

from ddpdoctor import registry, runner
from ddpdoctor.checks.distributed import culprits, fmt_ranks
from ddpdoctor.facts import bandwidth as bw
from ddpdoctor.facts.gpu import misplaced, rank_usage
from ddpdoctor.model import Report
from ddpdoctor.smoke.plan import SmokeConfig, fmt_bytes, to_dict
from ddpdoctor.units import MiB


def _records(world: Mapping | None) -> dict[int, dict]:
    return {int(k): v for k, v in ((world or {}).get("records") or {}).items() if v}


class SmokeFacts:
    """What the checks of `smoke` read (the `ctx`)."""

    def __init__(self, world: Mapping[str, Any], cfg: SmokeConfig, *, fix_world: Mapping | None = None,
                 env: Mapping[str, str] | None = None, master: str | None = None, port: int | None = None):
        self.world = world
        self.cfg = cfg
        self.records = _records(world)
        self.world_size = int(world.get("world_size") or len(self.records))
        self.backend = world.get("backend") or next((r.get("backend") for r in self.records.values() if r.get("backend")), "")
        self.verdict = world.get("verdict")
        self.fix_world = fix_world
        self.fix_records = _records(fix_world)
        self.env = dict(env or {})
        self.master, self.port = master, port  # DD801 compares MASTER_ADDR/PORT with these (None: standalone)


def build_report(world: Mapping[str, Any], cfg: SmokeConfig, *, launcher: str, select=(), ignore=(),
                 fail_on_warning: bool = False, fix_world: Mapping | None = None, env: Mapping[str, str] | None = None,
                 master: str | None = None, port: int | None = None, logs: Mapping[int, list[str]] | None = None,
                 duration_s: float | None = None) -> Report:
    ctx = SmokeFacts(world, cfg, fix_world=fix_world, env=env, master=master, port=port)
    if launcher == "standalone":  # we wrote the launch variables ourselves: DD801-803 would judge ddpdoctor
        ignore = tuple(ignore) + ("DD801", "DD802", "DD803")
    checks = registry.select("smoke", select=select, ignore=ignore)
    host = (ctx.records.get(0) or {}).get("host") or socket.gethostname()
    extra = {
        "launcher": launcher, "backend": ctx.backend, "world_size": ctx.world_size, "config": to_dict(cfg),
        "ranks": [ctx.records[r] for r in sorted(ctx.records)],
        "bandwidth": bw.world_rows({r: rec["bandwidth"] for r, rec in ctx.records.items() if rec.get("bandwidth")},
                                   ctx.world_size) if ctx.world_size > 1 else [],  # one rank: no bandwidth
        "verdict": ctx.verdict,
        "fix": {"ranks": [ctx.fix_records[r] for r in sorted(ctx.fix_records)]} if fix_world else None,
    }
    if logs:
        extra["logs"] = {str(r): lines for r, lines in sorted(logs.items()) if lines}
    extra["text"] = render_text(ctx, extra, logs or {})
    report = runner.run_report("smoke", host, checks, ctx, deadline=10.0, fail_on_warning=fail_on_warning, extra=extra)
    if duration_s is not None:  # the whole run, not only the judging
        report = Report(report.command, report.host, report.results, duration_s, report.fail_on_warning, report.extra)
    return report


def _own_gpu_mem(rec: Mapping[str, Any]) -> str:
    g = rec.get("gpu") or {}
    if not (g.get("nvml") or {}).get("available"):
        return "-"
    own = (g.get("expected") or {}).get("uuid")
    return ", ".join(f"GPU {u['gpu']}: {u['used'] / MiB:.0f} MiB" + ("" if u["uuid"] == own else " (not its own)")
                     for u in rank_usage(rec)) or "none"


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.2f}s" if s >= 0.1 else f"{s * 1e3:.0f}ms"


def _rank_busbw(rec: Mapping[str, Any], world_size: int) -> str:
    entries = rec.get("bandwidth") or []
    if not entries or world_size < 2:
        return "-"
    e = max(entries, key=lambda x: x["size"])
    return f"{bw.busbw('all_reduce', e['size'], bw.median(e['times']), world_size):.2f} GB/s"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def render_text(ctx: SmokeFacts, extra: Mapping[str, Any], logs: Mapping[int, list[str]]) -> str:
    lines = [f"{ctx.world_size} rank(s), backend {ctx.backend or 'not agreed yet'}, launcher {extra['launcher']}"]
    if ctx.records:
        rows = [["rank", "host", "local", "device", "import", "init", "collectives", "bandwidth", "busbw", "correct",
                 "GPU memory"]]
        for r in sorted(ctx.records):
            rec = ctx.records[r]
            ph = rec.get("phases") or {}
            corr = rec.get("correctness") or []
            ok = sum(1 for e in corr if e.get("ok"))
            state = "error" if rec.get("error") else f"{ok}/{len(corr)}"
            rows.append([str(r), str(rec.get("host", "?")), str(rec.get("local_rank", "?")), str(rec.get("device", "?")),
                         _secs(ph.get("import torch")), _secs(ph.get("init")), _secs(ph.get("correctness")),
                         _secs(ph.get("bandwidth")),
                         _rank_busbw(rec, ctx.world_size), state, _own_gpu_mem(rec)])
        lines += [""] + _table(rows)
    if extra["bandwidth"]:
        its = sorted({len(e["times"]) for rec in ctx.records.values() for e in rec.get("bandwidth") or []})
        lines += ["", f"all_reduce bandwidth (nccl-tests definitions; median of {'/'.join(map(str, its))} iterations "
                      "after warm-up, slowest rank)"]
        rows = [["size", "time", "algbw", "busbw"]]
        for row in extra["bandwidth"]:
            rows.append([fmt_bytes(row["size"]), f"{row['time_s'] * 1e3:.3f} ms", f"{row['algbw_gbps']:.3f} GB/s",
                         f"{row['busbw_gbps']:.3f} GB/s"])
        lines += _table(rows)
    elif ctx.world_size == 1 and any(rec.get("bandwidth") for rec in ctx.records.values()):
        lines += ["", "all_reduce bandwidth: needs two or more ranks (with one rank all_reduce moves no data)"]
    if ctx.verdict:
        v = ctx.verdict
        held_up_by = [s["rank"] for s in culprits(v["states"])]
        lines += ["", f"progress when {v['detected_by']} stopped the run ({v['after_s']} s; holding the others up: "
                      f"{'ranks ' + fmt_ranks(held_up_by) if held_up_by else 'none, all wait in one collective'})"]
        rows = [["rank", "host", "pid", "phase", "in phase", "heartbeat age", "state"]]
        for st in v["states"]:
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
        lines += _table(rows)
    if ctx.fix_records:
        moved = misplaced(ctx.fix_records)
        lines += ["", "--fix re-run (set_device before CUDA, device_id, device_ids, empty_cache): "
                      + ("memory still on another rank's GPU" if moved else "every rank's memory on its own GPU")]
    for r, tail in sorted(logs.items()):
        if tail:
            lines += ["", f"rank {r} output (last lines):"] + [f"  | {line}" for line in tail[-8:]]
    return "\n".join(lines)
