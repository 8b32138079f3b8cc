"""Dev counts behind logscan/calibration.py's TALLY: per (first mode, basis) of a first answer below render.LOW, how
often the dev label was that mode, UNKNOWN, or another label.

    python benchmarks/calibrate_explain.py            # the table, with the decision each row gets
    python benchmarks/calibrate_explain.py --python   # the same as a TALLY literal to paste

Dev split only (the held-out split is never read here: tuning on it would void its score). The step it counts
changes confidences only, never which mode is first, so counting with it in place gives the same table.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor import catalog  # noqa: E402
from ddpdoctor.logscan import explain_stream  # noqa: E402
from ddpdoctor.logscan.calibration import MARGIN, decision  # noqa: E402
from ddpdoctor.logscan.render import LOW  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"


def tally() -> dict[tuple[str, str], list[int]]:
    known = set(catalog.failures())
    out: dict[tuple[str, str], list[int]] = {}
    for line in (CORPUS / "manifest.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec["split"] != "dev":
            continue
        diags = explain_stream(io.BytesIO((CORPUS / rec["file"]).read_bytes()), rec["file"]).diagnoses
        if not diags or diags[0].confidence >= LOW:
            continue
        top = diags[0]
        label = rec["label"]
        c = out.setdefault((top.failure.id, top.basis), [0, 0, 0])
        if label == top.failure.id:
            c[0] += 1
        elif label == "UNKNOWN" or label not in known:
            c[1] += 1
        else:
            c[2] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="store_true", help="print a TALLY literal")
    a = ap.parse_args()
    t = tally()
    if a.python:
        print("TALLY: dict[tuple[str, str], tuple[int, int, int]] = {")
        for key in sorted(t):
            print(f"    {key!r}: {tuple(t[key])!r},")
        print("}")
        return 0
    print(f"{'first mode':<34} {'basis':<36} right unknown other  decision (margin {MARGIN})")
    for key in sorted(t, key=lambda k: (-(t[k][0] + t[k][1] + t[k][2]), k)):
        r, u, o = t[key]
        print(f"{key[0]:<34} {key[1]:<36} {r:>5} {u:>7} {o:>5}  {decision(key) or '-'} "
              f"{'(computed: ' + ('hide' if u - r >= MARGIN else 'show' if r - u >= MARGIN else '-') + ')'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
