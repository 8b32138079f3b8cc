"""The data every command produces: findings with fixes, check results, reports.

Plain frozen dataclasses with no behaviour beyond derivation, so checks, the runner and the
renderers can be tested apart. `to_dict` gives the JSON contract (docs/json-schema.md).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

SCHEMA_VERSION = 1


class Severity(enum.IntEnum):
    INFO = 10
    WARNING = 20
    ERROR = 30

    @property
    def label(self) -> str:
        return self.name.lower()


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    TIMEOUT = "timeout"
    CRASH = "crash"


CATEGORIES = ("reachability", "dns", "nic", "gpu", "distributed", "system", "slurm", "env", "ddpdoctor")


@dataclass(frozen=True)
class Fix:
    """How to repair a finding: a summary, commands to paste, variables to export.

    `env` is consumed directly by `--fix` style consumers (the Slurm task prolog exports exactly
    these), so it only ever holds values in the grammar of the variable it names.
    """

    summary: str
    commands: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    code: str = ""  # a code change, when the fix is one (e.g. torch.cuda.set_device(local_rank))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"summary": self.summary, "commands": list(self.commands), "env": dict(self.env)}
        if self.code:
            d["code"] = self.code
        return d


# A finding's kind: what went wrong, in a word (`refused`, `filtered`); with its check's id it is the
# finding's id, `DD101.refused`, which a site can silence (siteconfig: [checks] silenced). A check that
# finds one kind of thing leaves it at DEFAULT_KIND.
DEFAULT_KIND = "default"
KIND_RE = r"[a-z][a-z0-9_-]{0,31}"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    message: str
    hint: str = ""
    fix: Fix | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    kind: str = DEFAULT_KIND

    def sub_id(self, check_id: str) -> str:
        """`DD101.refused`: the check's id and this finding's kind."""
        return f"{check_id}.{self.kind}"

    def to_dict(self, check_id: str | None = None) -> dict[str, Any]:
        return {
            **({"id": self.sub_id(check_id)} if check_id else {}),
            "severity": self.severity.label,
            "message": self.message,
            "hint": self.hint,
            "fix": self.fix.to_dict() if self.fix else None,
            "evidence": _jsonable(self.evidence),
        }


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    category: str
    status: Status
    duration_s: float
    findings: tuple[Finding, ...] = ()
    reason: str = ""  # why skipped, timed out or crashed
    silenced: int = 0  # findings the site silenced by id ([checks] silenced), dropped from `findings`

    def to_dict(self) -> dict[str, Any]:
        d = {
            "id": self.id,
            "title": self.title,
            "category": self.category,
            "status": self.status.value,
            "duration_s": round(self.duration_s, 4),
            "findings": [f.to_dict(self.id) for f in self.findings],
        }
        if self.reason:
            d["reason"] = self.reason
        if self.silenced:
            d["silenced"] = self.silenced
        return d


def status_from_findings(findings: tuple[Finding, ...]) -> Status:
    worst = max((f.severity for f in findings), default=Severity.INFO)
    if worst >= Severity.ERROR:
        return Status.FAIL
    if worst >= Severity.WARNING:
        return Status.WARN
    return Status.PASS


@dataclass(frozen=True)
class Report:
    command: str
    host: str
    results: tuple[CheckResult, ...]
    duration_s: float
    fail_on_warning: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)  # command-specific sections (tables, per-rank records)

    @property
    def exit_code(self) -> int:
        """0 nothing failed; 1 a failure or timeout; 3 only ddpdoctor's own crash (a bug to report)."""
        statuses = {r.status for r in self.results}
        if Status.FAIL in statuses or Status.TIMEOUT in statuses:
            return 1
        if self.fail_on_warning and Status.WARN in statuses:
            return 1
        if Status.CRASH in statuses:
            return 3
        return 0

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for r in self.results:
            out[r.status.value] += 1
        return out

    def fix_env(self) -> dict[str, str]:
        """Every variable the findings ask to export, first finding wins on conflicts."""
        env: dict[str, str] = {}
        for r in self.results:
            for f in r.findings:
                if f.fix:
                    for k, v in f.fix.env.items():
                        env.setdefault(k, v)
        return env

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema": SCHEMA_VERSION,
            "command": self.command,
            "host": self.host,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 4),
            "counts": self.counts(),
            "results": [r.to_dict() for r in self.results],
        }
        d.update(_jsonable(dict(self.extra)))
        return d


def _jsonable(value: Any) -> Any:
    """Evidence comes from probes: make tuples, sets, enums and dataclasses JSON-safe."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "__dataclass_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, float) and not math.isfinite(value):
        return None  # NaN/Infinity are not JSON (render/json.py refuses them)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


jsonable = _jsonable  # for render/json.py: documents other than a Report go through the same conversion
