"""`--json`: every JSON document a command prints on stdout (contract in docs/json-schema.md).

The one place JSON is written: a report (`render`), any other document a command prints (`document`:
explain's, lint's, list-checks', network --listen's) and the error object of a failed run (`error`).
All of it strict JSON: NaN and Infinity become null (model.jsonable), never a non-standard token.
"""
from __future__ import annotations

import json
from typing import Any

from ddpdoctor.model import SCHEMA_VERSION, Report, jsonable


def render(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=False, allow_nan=False)  # strict JSON: no NaN


def document(obj: Any, *, indent: int | None = 2) -> str:
    """A JSON document that is not a Report (indent=None: one line)."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False)


def error(command: str, exit_code: int, kind: str, message: str) -> str:
    """What --json prints on stdout when a command cannot produce its report (a consumer parsing stdout
    must not get an empty document): `kind` is usage, bad_input or crash."""
    return document({"schema": SCHEMA_VERSION, "command": command, "exit_code": exit_code,
                     "error": {"kind": kind, "message": message}})
