"""What shape the misses of `explain --log` take on the real corpus, per split and decisive-line group, in counts only
(no log id of the held-out split is printed, so nobody tunes on one): the label first but below the naming level,
the label second or third, another mode named, or nothing near the label. Which shape dominates says what would move
the score: calibration (first but unnamed), ranking (second/third), rules and wordings (another mode or nothing).

    python benchmarks/miss_shapes.py
"""
from __future__ import annotations

import collections
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_explain import CORPUS, real_corpus  # noqa: E402

SHAPES = ("first, unnamed", "second or third", "other mode named", "nothing near")


def shape(label: str, diags, show: float) -> str | None:
    ids = [d.failure.id for d in diags]
    named = bool(diags) and diags[0].confidence >= show
    if ids[:1] == [label]:
        return None if named else SHAPES[0]
    if label in ids[1:3]:
        return SHAPES[1]
    return SHAPES[2] if named else SHAPES[3]


def main() -> None:
    from ddpdoctor import catalog
    from ddpdoctor.logscan import explain_stream
    from ddpdoctor.logscan.render import SHOW_FULL
    known = set(catalog.failures())
    table: dict = collections.defaultdict(collections.Counter)
    for rec in real_corpus():
        if rec["label"] == "UNKNOWN" or rec["label"] not in known:
            continue
        diags = explain_stream(io.BytesIO((CORPUS / rec["file"]).read_bytes()), rec["file"]).diagnoses
        key = (rec["split"], rec.get("decisive", "?"))
        table[key]["logs"] += 1
        s = shape(rec["label"], diags, SHOW_FULL)
        if s:
            table[key][s] += 1
    print(f"{'split':8} {'decisive':8} {'logs':>5} {'misses':>6}  " + "  ".join(f"{s:>16}" for s in SHAPES))
    for (split, dec), c in sorted(table.items()):
        miss = sum(c[s] for s in SHAPES)
        print(f"{split:8} {dec:8} {c['logs']:5} {miss:6}  " + "  ".join(f"{c[s]:16}" for s in SHAPES))


if __name__ == "__main__":
    main()
