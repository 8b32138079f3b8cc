"""The Slurm prolog's verdict and side effects, apart from its command line (ddpdoctor/cli/prolog.py).

judge() turns check results into Slurm's exit-code contract (0 healthy or unjudged, 1 a node
fault); write_report(), scontrol_drain() and Watchdog are the bounded actions around it.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

EXIT_HEALTHY, EXIT_FAULT, EXIT_USAGE, EXIT_CRASH = 0, 1, 2, 3
CRASH_HOOK = "DDPDOCTOR_TEST_CRASH"  # =prolog: raise inside the prolog, to prove a crash never drains (tests)
REASON_MAX = 200  # Slurm keeps the reason; keep it one readable line
SCONTROL_TIMEOUT = 3.0


def process_age() -> float:
    """Seconds since this process started (Python's start-up counts against the deadline)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def loud(msg: str) -> None:
    """stderr and syslog: a prolog's stdout is only logged by slurmd when it fails."""
    try:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()
    except OSError:
        pass
    try:
        import syslog
        syslog.openlog("ddpdoctor", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_ERR, msg)
    except Exception:  # noqa: BLE001 - no syslog on this host: stderr has it
        pass


@dataclass
class Verdict:
    faults: list[str] = field(default_factory=list)      # "DD601 /dev/shm is 64 MiB, ..."
    warnings: list[str] = field(default_factory=list)    # warn_only failures, warnings
    timeouts: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    exit_code: int = EXIT_HEALTHY

    @property
    def fault_lines(self) -> list[str]:
        return [f"ddpdoctor: {f}" for f in self.faults]

    def reason(self) -> str:
        if not self.faults:
            return ""
        r = f"ddpdoctor: {self.faults[0]}"
        if len(self.faults) > 1:
            r += f" (+{len(self.faults) - 1} more)"
        r = " ".join(r.split())
        return r if len(r) <= REASON_MAX else r[:REASON_MAX - 3] + "..."


def _no_answer(result) -> bool:
    """A finding about a probe that got no answer in time (e.g. DD201/DD207: a silent resolver)."""
    return any(f.evidence.get("timed_out") is True for f in result.findings)


def judge(results, config, *, strict: bool) -> tuple[Verdict, list]:
    """What the results mean for Slurm; warn_only failures are demoted to warnings in the results."""
    from ddpdoctor.model import Severity, Status

    v = Verdict()
    out = []
    for r in results:
        if r.status is Status.FAIL and config.is_warn_only(r.id):
            r = dataclasses.replace(r, status=Status.WARN, reason="warn_only in the site configuration")
            v.warnings += [f"{r.id} {f.message}" for f in r.findings if f.severity >= Severity.WARNING]
        elif r.status is Status.FAIL:
            v.faults += [f"{r.id} {f.message}" for f in r.findings if f.severity >= Severity.ERROR]
        elif r.status is Status.WARN and config.drain_on_timeout and _no_answer(r):
            # the site asked for it: a resolver that does not answer counts like a check that overran
            v.faults += [f"{r.id} {f.message}" for f in r.findings if f.evidence.get("timed_out")]
        elif r.status is Status.WARN:
            v.warnings += [f"{r.id} {f.message}" for f in r.findings if f.severity >= Severity.WARNING]
        elif r.status is Status.TIMEOUT:
            line = f"{r.id} {r.title}: timed out ({r.reason})"
            (v.faults if config.drain_on_timeout and not config.is_warn_only(r.id) else v.timeouts).append(line)
        elif r.status is Status.CRASH:
            v.crashes.append(f"{r.id} {r.reason}")
        out.append(r)
    if v.faults:
        v.exit_code = EXIT_FAULT
    elif strict and (v.crashes or v.timeouts):
        v.exit_code = EXIT_CRASH if v.crashes else EXIT_FAULT
    return v, out


def expand_path(template: str, node: str, job_id: str) -> str:
    return template.replace("%n", node or "unknown").replace("%j", job_id or "nojob")


def build_report(ctx, cfg, verdict: Verdict, results, *, node: str, job: str, drain: bool, drained: bool,
                 drain_error: str, duration_s: float):
    """The prolog's report: the checks' results and the verdict under `prolog` (the JSON contract)."""
    from ddpdoctor.model import Report
    extra = {"prolog": {
        "node": node, "job_id": job, "job_nodes": ctx.nodes, "first_node": ctx.master, "config": cfg.path,
        "exit_code": verdict.exit_code, "faults": verdict.fault_lines, "reason": verdict.reason(),
        "warnings": verdict.warnings, "timeouts": verdict.timeouts, "crashes": verdict.crashes,
        "drain_requested": bool(drain and verdict.faults), "drained": drained, "drain_error": drain_error,
        "process_age_s": round(process_age(), 3)}}
    return Report("prolog", ctx.hostname, tuple(results), duration_s, extra=extra)


def crash_record(exit_code: int, error: BaseException) -> dict:
    """What --report-file holds when ddpdoctor itself failed before a report existed."""
    return {"schema": 1, "command": "prolog", "prolog": {"exit_code": exit_code,
                                                          "crash": f"{type(error).__name__}: {error}"}}


def write_report(path: str, data: dict) -> str:
    """Write atomically and never through a planted symlink (streams.atomic_write); '' or why not."""
    from ddpdoctor.streams import atomic_write
    try:
        from ddpdoctor.render import json as rj
        text = rj.document(data) + "\n"
    except ValueError as e:
        return f"{path}: {e}"
    return atomic_write(path, text)


def scontrol_drain(node: str, reason: str, *, timeout: float = SCONTROL_TIMEOUT) -> str:
    """Drain `node` with `reason`; '' on success, else why not. Prologs run with no PATH set."""
    path = os.pathsep.join(p for p in (os.environ.get("PATH", ""), "/usr/bin:/usr/local/bin:/bin:/opt/slurm/bin") if p)
    exe = shutil.which("scontrol", path=path)
    if not exe:
        return "scontrol not found"
    try:
        p = subprocess.run([exe, "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"scontrol did not answer within {timeout:g} s"
    except OSError as e:
        return str(e)
    return "" if p.returncode == 0 else (p.stderr.strip() or p.stdout.strip() or f"scontrol exit {p.returncode}")


class Watchdog:
    """Ends the process if anything outside the checks (reading the config, an import, scontrol, a
    report write) hangs. Started before the configuration is read (a FIFO or a hung NFS mount at
    the config path blocks open() forever); `rearm` moves the deadline once the config names it."""

    def __init__(self, seconds: float, code: int, on_fire):
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._code = code
        self._on_fire = on_fire
        self._stop = time.monotonic() + seconds
        t = threading.Thread(target=self._run, name="prolog-watchdog", daemon=True)
        t.start()

    def rearm(self, seconds: float, code: int | None = None, on_fire=None) -> None:
        with self._lock:
            self._stop = time.monotonic() + seconds
            if code is not None:
                self._code = code
            if on_fire is not None:
                self._on_fire = on_fire

    def _run(self) -> None:
        while True:
            with self._lock:
                left = self._stop - time.monotonic()
            if left <= 0:
                break
            if self.done.wait(min(left, 0.1)):
                return
        with self._lock:
            code, on_fire = self._code, self._on_fire
        try:
            on_fire()
        finally:
            os._exit(code)
