"""`--json`: the report as one JSON document on stdout (contract in docs/json-schema.md)."""
from __future__ import annotations

import json

from ddpdoctor.model import Report


def render(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=False, allow_nan=False)  # strict JSON: no NaN
