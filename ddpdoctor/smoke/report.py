"""The world-wide report: rank 0's world data -> facts (facts/smoke.py) -> checks (DD4xx, DD5xx, DD8xx) -> Report.

The text sections (per-rank table, hung ranks) are render/smoke.py's, from the Report alone.

No torch here: rank 0's worker sends plain data (records per rank, the watchdog's verdict), and
the judging happens in the supervisor, like every other ddpdoctor command.
"""
from __future__ import annotations

import socket
from typing import Any, Mapping

from ddpdoctor import registry, runner
from ddpdoctor.facts import bandwidth as bw
from ddpdoctor.facts.smoke import SmokeWorld
from ddpdoctor.model import Report
from ddpdoctor.smoke.plan import SmokeConfig, to_dict


def build_report(world: Mapping[str, Any], cfg: SmokeConfig, *, launcher: str, select=(), ignore=(),
                 fail_on_warning: bool = False, fix_world: Mapping | None = None, env: Mapping[str, str] | None = None,
                 master: str | None = None, port: int | None = None, logs: Mapping[int, list[str]] | None = None,
                 duration_s: float | None = None) -> Report:
    ctx = SmokeWorld.from_worker(world, cfg, fix_world=fix_world, env=env, master=master, port=port)
    if launcher == "standalone":  # we wrote the launch variables ourselves: DD801-803 would judge ddpdoctor
        ignore = tuple(ignore) + ("DD801", "DD802", "DD803")
    checks = registry.select("smoke", select=select, ignore=ignore)
    host = ctx.records[0].host if 0 in ctx.records else socket.gethostname()
    extra = {
        "launcher": launcher, "backend": ctx.backend, "world_size": ctx.world_size, "config": to_dict(cfg),
        "ranks": [ctx.records[r].raw for r in sorted(ctx.records)],
        "bandwidth": bw.world_rows({r: list(rec.bandwidth) for r, rec in ctx.records.items() if rec.bandwidth},
                                   ctx.world_size) if ctx.world_size > 1 else [],  # one rank: no bandwidth
        "verdict": ctx.verdict.raw if ctx.verdict else None,
        "fix": {"ranks": [ctx.fix_records[r].raw for r in sorted(ctx.fix_records)]} if fix_world else None,
    }
    if logs:
        extra["logs"] = {str(r): lines for r, lines in sorted(logs.items()) if lines}
    report = runner.run_report("smoke", host, checks, ctx, deadline=10.0, fail_on_warning=fail_on_warning, extra=extra)
    if duration_s is not None:  # the whole run, not only the judging
        report = Report(report.command, report.host, report.results, duration_s, report.fail_on_warning, report.extra)
    return report


def report_of(run, cfg: SmokeConfig, *, select=(), ignore=(), fail_on_warning: bool = False,
              env: Mapping[str, str] | None = None) -> Report:
    """The report of a finished run (smoke/run.py SmokeRun) on rank 0, or standalone."""
    import time
    return build_report(run.world, cfg, launcher=run.launcher, select=select, ignore=ignore,
                        fail_on_warning=fail_on_warning, fix_world=run.fix_world, env=env, master=run.master,
                        port=run.port, logs=run.logs_of_failed(), duration_s=time.monotonic() - run.started)
