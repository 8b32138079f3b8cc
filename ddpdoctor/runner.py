"""Runs checks concurrently, each under its own timeout and all under a global deadline.

Every check runs in a daemon thread: a probe stuck in `getaddrinfo` (which has no timeout of its
own) or in a connect must not delay the process exit, and a ThreadPoolExecutor would join its
workers at exit. A check that raises becomes a CRASH result, one that overruns a TIMEOUT result;
neither kills the run. Results come back in the checks' order, whatever order they finished in.
"""
from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from typing import Any, Collection, Sequence

from ddpdoctor.model import CheckResult, Finding, Report, Status, status_from_findings
from ddpdoctor.registry import Check, Skip


class _Slot:
    __slots__ = ("done", "findings", "error", "skip", "start", "end")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.findings: list[Finding] = []
        self.error: str | None = None
        self.skip: str | None = None
        self.start = 0.0
        self.end = 0.0


def _run_one(chk: Check, ctx: Any, slot: _Slot) -> None:
    slot.start = time.monotonic()
    try:
        out = chk.func(ctx)
        if out is not None:
            for f in out:  # a generator: findings arrive as they are judged
                if not isinstance(f, Finding):
                    raise TypeError(f"{chk.id} yielded {type(f).__name__}, not Finding")
                slot.findings.append(f)
    except Skip as e:
        slot.skip = str(e) or "not applicable"
    except BaseException as e:  # noqa: BLE001 - a crashing check must become a result
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        slot.error = f"{type(e).__name__}: {e}{where}"
    finally:
        slot.end = time.monotonic()
        slot.done.set()


def run_checks(checks: Sequence[Check], ctx: Any, *, deadline: float = 30.0,
               silenced: Collection[str] | None = None) -> list[CheckResult]:
    """Start every check at once; wait for each until its timeout or the global deadline.

    `silenced`: finding ids (`DD101.refused`) to drop, the status then follows what is left; None:
    the site's (/etc/ddpdoctor.toml [checks] silenced, siteconfig.silenced())."""
    if silenced is None:
        from ddpdoctor.siteconfig import silenced as site_silenced
        silenced = site_silenced()
    results = _run_all(checks, ctx, deadline)
    return [silence(r, silenced) for r in results] if silenced else results


def silence(result: CheckResult, silenced: Collection[str]) -> CheckResult:
    """The result without the findings whose id is silenced; its status derived again from the rest."""
    keep = tuple(f for f in result.findings if f.sub_id(result.id) not in silenced)
    if len(keep) == len(result.findings):
        return result
    status = status_from_findings(keep) if result.status in (Status.PASS, Status.WARN, Status.FAIL) else result.status
    return dataclasses.replace(result, findings=keep, status=status, silenced=len(result.findings) - len(keep))


def _run_all(checks: Sequence[Check], ctx: Any, deadline: float) -> list[CheckResult]:
    t0 = time.monotonic()
    hard_stop = t0 + deadline
    slots = []
    for chk in checks:
        slot = _Slot()
        threading.Thread(target=_run_one, args=(chk, ctx, slot), name=f"check-{chk.id}", daemon=True).start()
        slots.append(slot)

    results = []
    for chk, slot in zip(checks, slots):
        # Each check's clock starts when it started (all start together), bounded by the deadline.
        own_stop = (slot.start or t0) + chk.timeout
        stop = min(own_stop, hard_stop)
        slot.done.wait(max(0.0, stop - time.monotonic()))
        if not slot.done.is_set():
            why = (f"no verdict within its {chk.timeout:g} s timeout" if own_stop <= hard_stop
                   else f"stopped by the global deadline of {deadline:g} s")
            results.append(CheckResult(chk.id, chk.title, chk.category, Status.TIMEOUT,
                                       time.monotonic() - (slot.start or t0), tuple(slot.findings), why))
            continue
        dur = slot.end - slot.start
        if slot.error is not None:
            results.append(CheckResult(chk.id, chk.title, chk.category, Status.CRASH, dur, (),
                                       f"ddpdoctor bug, please report: {slot.error}"))
        elif slot.skip is not None:
            results.append(CheckResult(chk.id, chk.title, chk.category, Status.SKIP, dur, (), slot.skip))
        else:
            f = tuple(slot.findings)
            results.append(CheckResult(chk.id, chk.title, chk.category, status_from_findings(f), dur, f))
    return results


def run_report(command: str, host: str, checks: Sequence[Check], ctx: Any, *, deadline: float,
               fail_on_warning: bool = False, extra: dict | None = None,
               silenced: Collection[str] | None = None) -> Report:
    t0 = time.monotonic()
    results = run_checks(checks, ctx, deadline=deadline, silenced=silenced)
    return Report(command, host, tuple(results), time.monotonic() - t0, fail_on_warning, extra or {})
