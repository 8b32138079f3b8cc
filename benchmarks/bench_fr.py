"""How fast `ddpdoctor explain --fr` reads a large job's flight-recorder dumps (target: 64 ranks under 1 s).

    python benchmarks/bench_fr.py                    # 64 ranks x 2000 entries (TORCH_FR_BUFFER_SIZE=2000)
    python benchmarks/bench_fr.py --ranks 256 --entries 20000

The dumps are synthesized from the structure of real ones (tests/flightrec/: the H100 NCCL dump's entries with
their Python frames, the Gloo dumps' pg_config quirks): each rank's buffer holds the last N collectives of the
default group, and one rank skipped the last all_reduce (the hang to find). Prints the in-process time of
load_dir + analyze, the end-to-end time of the command (a fresh interpreter, as a user runs it), and the ratio
to the 1 s target; checks that the verdict names the rank.
"""
from __future__ import annotations

import argparse
import copy
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor import flightrec  # noqa: E402
from ddpdoctor.flightrec import safe_pickle  # noqa: E402

NCCL_DUMP = ROOT / "tests" / "flightrec" / "nccl-fr-timeout" / "fr_rank0"


def synthesize(out: Path, ranks: int, entries: int, culprit: int) -> int:
    real = safe_pickle.loads(NCCL_DUMP.read_bytes())
    template = real["entries"][0]  # a real nccl:all_reduce entry, frames included
    total = 0
    for r in range(ranks):
        d = copy.deepcopy(real)
        d["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}}
        last = 10_000 + entries - (1 if r == culprit else 0)
        es = []
        for i, seq in enumerate(range(last - entries + 1, last + 1)):
            e = dict(template)
            e.update(collective_seq_id=seq, op_id=seq, record_id=seq - 1,
                     state="scheduled" if seq == 10_000 + entries else "completed",
                     time_created_ns=template["time_created_ns"] + i * 1000)
            es.append(e)
        d["entries"] = es
        d["pg_status"] = {"0": {"last_enqueued_collective": last, "last_started_collective": -1,
                                "last_completed_collective": 10_000 + entries - 1}}
        data = pickle.dumps(d)
        total += len(data)
        (out / f"fr_rank{r}").write_bytes(data)
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    culprit = a.ranks // 2 + 5 if a.ranks > 8 else a.ranks - 1
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        size = synthesize(out, a.ranks, a.entries, culprit)
        inproc = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            v = flightrec.analyze(*flightrec.load_dir(str(out)))
            inproc.append(time.perf_counter() - t)
        g = v.first
        ok = g.status == "diverged" and g.not_entered == (culprit,) and len(g.waiting) == a.ranks - 1
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        e2e = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "ddpdoctor", "explain", "--fr", str(out)], env=env,
                               capture_output=True, text=True, timeout=120)
            e2e.append(time.perf_counter() - t)
            ok = ok and r.returncode == 0 and f"origin): rank {culprit} " in r.stdout
    med_in, med_e2e = statistics.median(inproc), statistics.median(e2e)
    print(f"explain --fr: {a.ranks} ranks x {a.entries} entries, {size / 1e6:.1f} MB of dumps")
    print(f"  load_dir + analyze (in process): median {med_in * 1000:.0f} ms  (min {min(inproc) * 1000:.0f} ms)"
          f"  = {med_in:.2f}x the 1 s target")
    print(f"  `ddpdoctor explain --fr` end to end: median {med_e2e * 1000:.0f} ms  (min {min(e2e) * 1000:.0f} ms)"
          f"  = {med_e2e:.2f}x the 1 s target")
    print(f"  verdict: {'names rank %d as the origin' % culprit if ok else 'WRONG: ' + repr(g)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
