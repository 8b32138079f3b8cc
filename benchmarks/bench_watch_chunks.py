"""Would longer `py-spy record` chunks (fewer ≈25 ms py-spy starts) name stragglers as soon? Replays traces
recorded by `bench_watch.py trace` through the judge as if each rank's chunks had been N times longer.

    python3 benchmarks/bench_watch_chunks.py TRACE.jsonl ... [--times 1,2,3]

py-spy record writes its samples only when it ends (py-spy src/main.rs, record_samples), so a longer
chunk hands them over later. Each rank's N consecutive recorded chunks are merged into one (counts
and lines summed) and delivered when the last of them arrived; every phase of the merge is tried (which
chunk a longer one would have started with). Prints the straggler (S) and recovered (R) events, seconds
from the trace's start, with the rank, beside the faults' marks: compare with `--times 1` (as recorded).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddpdoctor.watch.judge import Judge  # noqa: E402


def merged(rows: list[dict], times: int, phase: int) -> list[dict]:
    pend: dict[int, list] = {}
    first: set[int] = set()
    out = []
    for r in rows:
        if "obs" not in r:
            out.append(r)
            continue
        obs = []
        for o in r["obs"]:
            rec = o.get("rec")
            if rec is not None:
                pid = o["pid"]
                p = pend.setdefault(pid, [phase if pid not in first else 0, 0, 0, Counter()])
                first.add(pid)
                p[0] += 1
                p[1] += rec["n"]
                p[2] += rec["wait"]
                p[3].update(rec.get("lines") or {})
                o = {k: v for k, v in o.items() if k != "rec"}
                if p[0] >= times:
                    o["rec"] = {"n": p[1], "wait": p[2], "lines": dict(p[3].most_common(8))}
                    del pend[pid]
            obs.append(o)
        out.append({**r, "obs": obs})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--times", default="1,2,3", help="chunk lengths to try, in recorded chunks (10 s each)")
    a = ap.parse_args()
    for f in a.traces:
        rows = [json.loads(ln) for ln in open(f)]
        t0 = rows[0]["t"]
        print(f"{Path(f).name}: marks " + (", ".join(f"{r['t'] - t0:.0f} {r['mark']}" for r in rows if "mark" in r)
                                          or "none (healthy)"))
        for times in (int(x) for x in a.times.split(",")):
            for phase in range(times):
                j = Judge()
                ev = []
                for r in merged(rows, times, phase):
                    if "obs" in r:
                        ev += [e for e in j.feed(r["obs"], r["t"]) if e["kind"] in ("straggler", "recovered")]
                print(f"  chunks x{times} (phase {phase}): "
                      + (", ".join(f"{e['t'] - t0:.0f}{'S' if e['kind'] == 'straggler' else 'R'}{e['ranks']}" for e in ev)
                         or "-"), flush=True)


if __name__ == "__main__":
    main()
