"""The CPU CUSUM of watch/straggler.py under Gaussian noise: how long a healthy rank goes before a false
straggler (ARL0), and how soon a lag is named, for the noise sizes measured in the recorded traces.

    python3 benchmarks/bench_watch_cusum_arl.py [--sd 0.05,0.06,0.08] [--paths 4000] [--hours 40]
    python3 benchmarks/bench_watch_cusum_arl.py --rule core --sd 0.08,0.10,0.115 --lags 0.15,0.18,0.25
        the wait CUSUM of watch/corejudge.py (a busy core): x = a block's delay share over the others' median,
        its noise measured in the recorded healthy traces (sd 0.077-0.115 at load 1-22)

Each 5 s block's CPU excess x ~ N(mu, sd), independent block to block (the traces: lag-1 autocorrelation
-0.06-0.14); S = max(0, S + 5 s * (min(x, RUN_CLIP) - RUN_K)), named at S >= RUN_H after RUN_MIN_S with the
last block >= RUN_K (the samples' confirmation left out: this bounds the false events from above). Real
transients (a healthy rank that really runs slower for a while) are not Gaussian noise: replay recorded
traces for them (bench_watch.py replay).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddpdoctor.watch import corejudge  # noqa: E402
from ddpdoctor.watch.straggler import RUN_CLIP, RUN_H, RUN_K, RUN_MIN_S, STRAGGLER_EVERY_S  # noqa: E402

DT = STRAGGLER_EVERY_S
RULES = {"cpu": (RUN_CLIP, RUN_H, RUN_K, RUN_MIN_S),
         "core": (corejudge.CORE_CLIP, corejudge.CORE_H, corejudge.CORE_K, corejudge.CORE_MIN_S)}


def first_alarm(mu: float, sd: float, paths: int, blocks: int, seed: int, rule: str = "cpu") -> np.ndarray:
    """Seconds to the first verdict on each path (inf: none within `blocks`)."""
    RUN_CLIP, RUN_H, RUN_K, RUN_MIN_S = RULES[rule]  # noqa: N806 - the rule's constants under their CPU names
    rng = np.random.default_rng(seed)
    s, since, at = np.zeros(paths), np.zeros(paths), np.full(paths, np.inf)
    for i in range(blocks):
        x = mu + sd * rng.standard_normal(paths)
        since = np.where(s <= 0, i * DT, since)
        s = np.maximum(0.0, s + DT * (np.minimum(x, RUN_CLIP) - RUN_K))
        hit = (s >= RUN_H) & ((i + 1) * DT - since >= RUN_MIN_S) & (x >= RUN_K) & np.isinf(at)
        at[hit] = (i + 1) * DT
    return at


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sd", default="0.05,0.06,0.08", help="the noise of a 5 s block's CPU excess")
    ap.add_argument("--lags", default="0.17,0.26", help="a straggler's mean CPU excess (+10 %: 0.17-0.31)")
    ap.add_argument("--paths", type=int, default=4000)
    ap.add_argument("--hours", type=float, default=40)
    ap.add_argument("--rule", choices=sorted(RULES), default="cpu")
    a = ap.parse_args()
    for sd in (float(x) for x in a.sd.split(",")):
        at = first_alarm(0.0, sd, a.paths, int(a.hours * 3600 / DT), seed=1, rule=a.rule)
        fired = np.isfinite(at)
        line = (f"sd {sd}: healthy paths with a false straggler within {a.hours:g} h: {fired.sum()} of {a.paths}"
                + (f" (ARL0 ≈ {np.where(fired, at, a.hours * 3600).sum() / fired.sum() / 3600:.0f} h)" if fired.any()
                   else f" (none in {a.paths * a.hours:g} simulated rank-hours)"))
        for mu in (float(x) for x in a.lags.split(",")):
            d = first_alarm(mu, sd, a.paths, 60, seed=2, rule=a.rule)
            line += f"; excess {mu}: named after {np.median(d):.0f} s median, {np.mean(d <= 60):.0%} within 60 s"
        print(line, flush=True)


if __name__ == "__main__":
    main()
