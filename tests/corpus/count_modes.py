"""Print the ranked mode table of FREQUENT.md from manifest.jsonl: python tests/corpus/count_modes.py"""
from __future__ import annotations

import collections
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    recs = [json.loads(line) for line in (HERE / "manifest.jsonl").read_text().splitlines() if line.strip()]
    count = collections.Counter(r["label"] for r in recs)
    ev: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in recs:
        ev[r["label"]][r["evidence"]] += 1
    proposed = {r["label"] for r in recs if r["proposed"]}
    print(f"{len(recs)} logs, {len({r['thread'] for r in recs})} threads, {len({r['project'] for r in recs})} projects\n")
    print("| rank | mode | logs | m/u/i | in catalog |\n|---:|---|---:|---|---|")
    rank = 0
    last = None
    for i, (label, n) in enumerate(sorted(count.items(), key=lambda kv: (-kv[1], kv[0])), 1):
        if n != last:
            rank, last = i, n
        e = ev[label]
        cat = "—" if label == "UNKNOWN" else ("**PROPOSED**" if label in proposed else "yes")
        name = f"**{label}**" if label in proposed else label
        print(f"| {rank} | {name} | {n} | {e['confirmed-maintainer']}/{e['confirmed-user']}/{e['inferred']} | {cat} |")


if __name__ == "__main__":
    main()
