"""The catalog of failure modes: one place that knows, for each way a distributed PyTorch set-up
fails, the log lines that reveal it, the pre-flight checks that catch it, and the fix.

`ddpdoctor explain ID` prints an entry, `ddpdoctor explain --log` matches a log against the
signatures, and `python -m ddpdoctor.catalog.gendocs` writes the browsable pages under checks/.
Ids are the UPPER_SNAKE names of shared/failure-catalog.md; they are stable and never reused.
"""
from __future__ import annotations

from ddpdoctor.catalog.model import CONSEQUENCE, ROOT, Confirm, FailureMode, Signature

_MODULES = ("launch", "names", "network", "containers", "nccl", "code")

_FAILURES: dict[str, FailureMode] | None = None


def failures() -> dict[str, FailureMode]:
    """Every failure mode by id, in catalog order (launch, names, network, containers, NCCL/GPU, code)."""
    global _FAILURES
    if _FAILURES is None:
        import importlib

        out: dict[str, FailureMode] = {}
        for name in _MODULES:
            for fm in importlib.import_module(f"ddpdoctor.catalog.{name}").MODES:
                if fm.id in out:
                    raise ValueError(f"failure id {fm.id} defined twice")
                out[fm.id] = fm
        _FAILURES = out
    return _FAILURES


def get(failure_id: str) -> FailureMode | None:
    return failures().get(failure_id.strip().upper())


def failures_for_check(check_id: str) -> list[FailureMode]:
    """Failure modes that name `check_id` among their pre-flight checks."""
    cid = check_id.upper()
    return [fm for fm in failures().values() if cid in fm.checks]


__all__ = ["FailureMode", "Signature", "Confirm", "ROOT", "CONSEQUENCE", "failures", "get", "failures_for_check"]
