"""Dev counts behind logscan/calibration.py's TALLY: per (first mode, basis) of a first answer below render.LOW, how
often the dev label was that mode, UNKNOWN, or another label.

    python benchmarks/calibrate_explain.py            # the table, with the decision each row gets
    python benchmarks/calibrate_explain.py --python   # the same as a TALLY literal to paste
    python benchmarks/calibrate_explain.py --loo      # leave-one-out: right answers without, with, per key scheme

Dev split only (the held-out split is never read here: tuning on it would void its score). The step it counts
changes confidences only, never which mode is first, so counting with it in place gives the same table.
"""
from __future__ import annotations

import argparse
import functools
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor import catalog  # noqa: E402
from ddpdoctor.logscan import explain_stream  # noqa: E402
from ddpdoctor.logscan import calibration  # noqa: E402
from ddpdoctor.logscan.calibration import MARGIN, SHOW_FULL, decision, key  # noqa: E402
from ddpdoctor.logscan.render import LOW  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"


@functools.lru_cache(maxsize=1)
def undecided() -> tuple[tuple[str, tuple], ...]:
    """(label, diagnoses) per dev log whose first answer is below LOW, as the ranker gives them before calibration
    (TALLY and ORDER emptied while reading): read once, for the tally and the order counts alike."""
    out = []
    saved, calibration.TALLY, saved_order, calibration.ORDER = calibration.TALLY, {}, calibration.ORDER, {}
    try:
        for line in (CORPUS / "manifest.jsonl").read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec["split"] != "dev":
                continue
            diags = explain_stream(io.BytesIO((CORPUS / rec["file"]).read_bytes()), rec["file"]).diagnoses
            if diags and diags[0].confidence < LOW:
                out.append((rec["label"], tuple(diags)))
    finally:
        calibration.TALLY, calibration.ORDER = saved, saved_order
    return tuple(out)


def rows() -> list[tuple[tuple[str, str, bool], str, float]]:
    """(key, label class "right"/"unknown"/"other", ceiling) per dev log whose first answer is below LOW."""
    known = set(catalog.failures())
    out = []
    for label, diags in undecided():
        top = diags[0]
        cls = ("right" if label == top.failure.id else
               "unknown" if label == "UNKNOWN" or label not in known else "other")
        out.append((key(top), cls, top.failure.ceiling))
    return out


def order_tally() -> dict[tuple[str, str, str], list[int]]:
    """(first mode, basis, second mode): [label was the first, label was the second], dev logs whose first answer
    is below LOW, as the ranker gives them before calibration."""
    out: dict = {}
    for label, diags in undecided():
        if len(diags) < 2:
            continue
        c = out.setdefault((diags[0].failure.id, diags[0].basis, diags[1].failure.id), [0, 0])
        c[0] += label == diags[0].failure.id
        c[1] += label == diags[1].failure.id
    return out


def tally(rs=None, key_of=lambda k: k, skip: int = -1) -> dict:
    out: dict = {}
    for i, (k, cls, _) in enumerate(rows() if rs is None else rs):
        if i == skip:
            continue
        c = out.setdefault(key_of(k), [0, 0, 0])
        c[("right", "unknown", "other").index(cls)] += 1
    return out


def loo(rs) -> None:
    """Each dev log judged by counts that leave it out: what calibration would do on a log it never counted."""
    def right(named: bool, cls: str) -> bool:
        return (named and cls == "right") or (not named and cls == "unknown")
    base = sum(right(k[2], cls) for k, cls, _ in rs)
    print(f"{len(rs)} dev logs with a first answer below LOW; right as the ranker gives them: {base}")
    for name, key_of in (("mode, basis, named", lambda k: k), ("mode, basis", lambda k: k[:2])):
        n = 0
        for i, (k, cls, ceiling) in enumerate(rs):
            c = tally(rs, key_of, skip=i).get(key_of(k), [0, 0, 0])
            lean = c[0] - c[1]
            named = k[2]
            if lean <= -MARGIN and (named or name != "mode, basis, named"):
                named = False
            elif lean >= MARGIN and ceiling >= SHOW_FULL and (not named or name != "mode, basis, named"):
                named = True
            n += right(named, cls)
        print(f"  calibrated by ({name}), margin {MARGIN}: {n}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="store_true", help="print a TALLY literal (keys seen twice or more)")
    ap.add_argument("--loo", action="store_true", help="leave-one-out estimate of what calibration gains")
    a = ap.parse_args()
    rs = rows()
    if a.loo:
        loo(rs)
        return 0
    t = tally(rs)
    if a.python:
        print("TALLY: dict[tuple[str, str, bool], tuple[int, int, int]] = {")
        for k in sorted(t):
            if sum(t[k]) >= 2:
                print(f"    {k!r}: {tuple(t[k])!r},")
        print("}")
        o = order_tally()
        print("ORDER: dict[tuple[str, str, str], tuple[int, int]] = {")
        for k in sorted(o):
            if o[k][1]:
                print(f"    {k!r}: {tuple(o[k])!r},")
        print("}")
        return 0
    print(f"{'first mode':<34} {'basis':<36} named right unknown other  fresh decision (margin {MARGIN}), table's")
    for k in sorted(t, key=lambda k: (-sum(t[k]), k)):
        r, u, o = t[k]
        print(f"{k[0]:<34} {k[1]:<36} {'yes' if k[2] else 'no':>5} {r:>5} {u:>7} {o:>5}  "
              f"{decision(k, {k: t[k]}) or '-':<6} {decision(k) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
