"""The catalog of failure modes: one place that knows, for each way a distributed PyTorch set-up
fails, the log lines that reveal it, the pre-flight checks that catch it, and the fix.

`ddpdoctor explain ID` prints an entry, `ddpdoctor explain --log` matches a log against the
signatures, and `python -m ddpdoctor.catalog.gendocs` writes the browsable pages under docs/reference/checks/.
Ids are the UPPER_SNAKE names of shared/failure-catalog.md; they are stable and never reused.
"""
from __future__ import annotations

from ddpdoctor.catalog.model import CONSEQUENCE, ROOT, Confirm, FailureMode, Signature

_FAILURES: dict[str, FailureMode] | None = None


def failures() -> dict[str, FailureMode]:
    """Every failure mode by id, read from the data files (catalog/modes/*.toml; see load.py)."""
    global _FAILURES
    if _FAILURES is None:
        from ddpdoctor.catalog.load import load_catalog

        _FAILURES = load_catalog()
    return _FAILURES


def get(failure_id: str) -> FailureMode | None:
    return failures().get(failure_id.strip().upper())


def failures_for_check(check_id: str) -> list[FailureMode]:
    """Failure modes that name `check_id` among their pre-flight checks."""
    cid = check_id.upper()
    return [fm for fm in failures().values() if cid in fm.checks]


__all__ = ["FailureMode", "Signature", "Confirm", "ROOT", "CONSEQUENCE", "failures", "get", "failures_for_check"]
