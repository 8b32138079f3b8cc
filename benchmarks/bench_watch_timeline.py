"""Where the time from a straggler's onset to its verdict goes: a recorded trace (bench_watch.py trace) fed to
the judge of this tree, printed judgement by judgement around each `lag:R:X` mark.

    python3 benchmarks/bench_watch_timeline.py TRACE.jsonl ... [--before 10] [--after 90]
    python3 benchmarks/bench_watch_timeline.py --events [--tree /work/main] TRACE.jsonl ...

--events: only each trace's straggler/recovered events (seconds from the trace's start, the rank, the cause),
each fault mark's time to its verdict, and the events outside any fault (from the trace's start to the first
mark, and in traces named healthy*: false events), with this tree's judge or --tree's (side by side on the
same traces: the busy-core marks `hog:R[:DUTY]` / `hogfree:R[:DUTY]` of bench_watch.py trace included).

Each line, seconds after the onset: the newest record chunk of the lagging rank (when it ended: a chunk
covers the 10 s before it), the lag the judge sees over its 20 s window (lags(): the mean of both
measures), its two parts over the last chunk alone (samples: the others' share in a collective minus its
own; busy: its busy share minus the others'), its CPU excess over the last 5 s block (on-CPU time over the
others' median, minus 1: what the CPU CUSUM adds up), the CUSUM (this tree's rule; the excess of the rule
before it when the judge has one), and the verdict. Run it with another tree's PYTHONPATH to see that
tree's rule on the same trace.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# --tree DIR: that checkout's judge (its rule on the same traces); else this one's
_TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1] else str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, _TREE)

from ddpdoctor.watch.judge import Judge  # noqa: E402
from ddpdoctor.watch.record import CHUNK_S  # noqa: E402


def _run_share(ticks, a, b):
    sel = [x for x in ticks if a <= x[0] <= b]
    if len(sel) < 2:
        return None
    return ((sel[-1][1] - sel[-1][2]) - (sel[0][1] - sel[0][2])) / 1e9 / (sel[-1][0] - sel[0][0])


def timeline(path: str, before: float, after: float) -> None:
    rows = [json.loads(ln) for ln in open(path)]
    marks = [(r["t"], r["mark"]) for r in rows if "mark" in r]
    for onset, spec in marks:
        if not spec.startswith(FAULTS):
            continue
        rank = int(spec.split(":")[1])
        print(f"{Path(path).name}: {spec} (load {next(r['load'] for r in rows if r['t'] >= onset):.1f})")
        print("   t  chunk-end   lag(20 s)  samples  busy  cpu-excess(5 s)  cusum  delay-excess(5 s)  core-cusum  verdict")
        j = Judge()
        last_t = None
        for r in rows:
            if "obs" not in r:
                continue
            now = r["t"]
            ev = j.feed(r["obs"], now)
            seen = j._strag_seen[-1] if j._strag_seen else None
            if not (onset - before <= now <= onset + after) or seen is None or seen[0] != now:
                continue
            key = next((k for k, t in j.ranks.items() if t.rank == rank and not t.gone), None)
            if key is None:
                continue
            t = j.ranks[key]
            others = [o for k, o in j.ranks.items() if k != key and not o.gone]
            sh = j.shares(now)
            lag = j.lags(sh).get(key)
            ch = t.chunks[-1] if t.chunks else None
            och = [o.chunks[-1] for o in others if o.chunks]
            samples = (statistics.median(c[2] / c[1] for c in och) - ch[2] / ch[1]) if ch and och else None
            busy = None
            if key in sh and len(sh) > 1:
                busy = sh[key]["busy"] - statistics.median(sh[k]["busy"] for k in sh if k != key)
            a = last_t if last_t is not None else now - 5
            dex = _delay_excess(t, others, a - 0.5, now)
            core = getattr(j, "_core", None)
            core = core.acc.get(key) if core is not None else None
            mine, theirs = _run_share(t.ticks, a - 0.5, now), [_run_share(o.ticks, a - 0.5, now) for o in others]
            theirs = [x for x in theirs if x]
            excess = mine / statistics.median(theirs) - 1 if mine is not None and theirs else None
            last_t = now
            acc = getattr(j, "_cusum", {}).get(key)
            cusum = f"{acc[0]:5.2f}" if acc else (f"{seen[3]:5.2f}" if len(seen) > 3 and seen[4] == key else "  -  ")
            verdict = ", ".join(f"{e['kind']} {e['ranks']}" for e in ev if e["kind"] in ("straggler", "recovered"))

            def f(x):
                return "   -  " if x is None else f"{x:+.3f}"
            print(f"{now - onset:5.0f}  {(ch[0] - onset) if ch else float('nan'):+6.0f} s ({CHUNK_S} s)  {f(lag)}  "
                  f"{f(samples)} {f(busy)}  {f(excess)}           {cusum}  {f(dex)}             "
                  f"{f'{core[0]:5.2f}' if core else '  -  '}       {verdict}")


FAULTS = ("lag:", "cap:", "hog:", "hogfree:")


def _delay_excess(t, others, a, b):
    """Its main thread's delay share from a to b minus the others' median (what the core CUSUM adds up)."""
    def d(tk):
        sel = [x for x in tk if a <= x[0] <= b]
        return (sel[-1][2] - sel[0][2]) / 1e9 / (sel[-1][0] - sel[0][0]) if len(sel) > 1 else None
    mine, theirs = d(t.ticks), [x for x in (d(o.ticks) for o in others) if x is not None]
    return mine - statistics.median(theirs) if mine is not None and theirs else None


def named_after(rows: list[dict], ev: list[dict]) -> list[tuple[str, float | None]]:
    """Each fault mark (`lag:R:X`, `cap:R:S`, `hog:R[:D]`, `hogfree:R[:D]`) of a trace: seconds from it to the
    first straggler event naming rank R before the next mark (+30 s), None when missed."""
    marks = [(r["t"], r["mark"]) for r in rows if "mark" in r]
    out = []
    for i, (t, m) in enumerate(marks):
        if not m.startswith(FAULTS):
            continue
        end = (marks[i + 1][0] if i + 1 < len(marks) else rows[-1]["t"]) + 30
        rank = int(m.split(":")[1])
        hit = [e["t"] for e in ev if e["kind"] == "straggler" and t < e["t"] <= end and e["ranks"] == [rank]]
        out.append((m, hit[0] - t if hit else None))
    return out



def events(path: str) -> tuple[int, float, list]:
    """One trace through the judge: its events printed; -> (false events, healthy seconds, named_after)."""
    rows = [json.loads(ln) for ln in open(path)]
    j, ev = Judge(), []
    for r in rows:
        if "obs" in r:
            ev += [e for e in j.feed(r["obs"], r["t"]) if e["kind"] in ("straggler", "recovered")]
    t0 = rows[0]["t"]
    marks = [(r["t"], r["mark"]) for r in rows if "mark" in r]
    healthy_end = rows[-1]["t"] if Path(path).name.startswith("healthy") or not marks else marks[0][0]
    false = [e for e in ev if e["kind"] == "straggler" and e["t"] <= healthy_end]
    print(f"{Path(path).name}: " + ", ".join(f"{t - t0:.0f} {m}" for t, m in marks))
    for e in ev:
        print(f"  {e['t'] - t0:6.0f} s {e['kind']} {e['ranks']}" + (f": {e['detail']}; {e.get('cause') or ''}"
                                                                  if e["kind"] == "straggler" else ""))
    got = named_after(rows, ev)
    for m, d in got:
        print(f"  {m}: " + ("missed" if d is None else f"named after {d:.0f} s"))
    return len(false), healthy_end - t0, got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--before", type=float, default=10)
    ap.add_argument("--after", type=float, default=90)
    ap.add_argument("--events", action="store_true", help="events, times to verdict and false events only")
    ap.add_argument("--tree", default=_TREE, help="the checkout whose judge replays the traces")
    a = ap.parse_args()
    if not a.events:
        for p in a.traces:
            timeline(p, a.before, a.after)
        return
    false = healthy = 0.0
    named = []
    for p in a.traces:
        f, h, got = events(p)
        false, healthy, named = false + f, healthy + h, named + got
    print(f"judge of {a.tree}: {false:.0f} false straggler(s) in {healthy / 60:.0f} min before any fault "
          f"({false * 3600 / max(healthy, 1):.1f} an hour)")
    for kind in FAULTS:
        ds = [d for m, d in named if m.startswith(kind)]
        if ds:
            hit = sorted(d for d in ds if d is not None)
            print(f"  {kind[:-1]}: named {len(hit)}/{len(ds)}"
                  + (f", median {statistics.median(hit):.0f} s, worst {hit[-1]:.0f} s" if hit else ""))


if __name__ == "__main__":
    main()
