"""What the gate pass of the log scan costs per gate word (issue 23: is the 64-word limit real?).

    python benchmarks/bench_gates.py                  # 100 MB make_log log, 60 64 65 72 96 128 words
    python benchmarks/bench_gates.py --size-mb 20 --counts 64 65

The gate pass (logscan/matcher.py, gatefind.py) finds, in each lowercased 4 MiB block, the lines holding any gate
word: one leftmost-first Aho-Corasick automaton (ahocorasick_rs, the Rust aho-corasick crate) over the block, or one
libc memmem pass a word where ahocorasick_rs is missing. The words here are the real gate list (Matcher._gate_list)
followed by catalog triggers that are not gates (real rare words, in catalog order) up to each count (the first N
by length when the real list is longer). Per count it prints the gate pass of:
  one       one automaton of all N words
  64+rest   one automaton of the first 64 words (by length), one of the rest (how the pass split before)
  even      gatefind.groups: the fewest groups of <= 64 (TEDDY_MAX), of even sizes (how the pass splits now)
  dfa       one automaton of all N words built as a DFA (Implementation.DFA)
as CPU ms per 100 MB, and, once, memmem's CPU cost per word. CPU time (process_time), best of --repeat: the machine
is shared, so wall time would measure the neighbours; the spread between runs is still +-30 % there.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_explain import _cpu as cpu, make_log  # noqa: E402  (best-of-N process CPU time)

from ddpdoctor.logscan import default_matcher  # noqa: E402
from ddpdoctor.logscan.gatefind import FIND, TEDDY_MAX, groups  # noqa: E402
from ddpdoctor.logscan.reader import CHUNK  # noqa: E402


def words(n: int) -> list[bytes]:
    """The real gate words, then catalog triggers that are not gate words (no duplicates), n in all."""
    m = default_matcher()
    out = list(m._gate_list)
    seen = set(out)
    for rule in m.rules:
        for t in rule.triggers:
            if t not in seen and len(t) >= 4:
                seen.add(t)
                out.append(t)
    if len(out) < n:
        raise SystemExit(f"only {len(out)} distinct words in the catalog")
    return out[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=100)
    ap.add_argument("--counts", type=int, nargs="+", default=[60, 64, 65, 72, 96, 128])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memmem-words", type=int, default=16, help="words timed with memmem (per-word cost)")
    args = ap.parse_args()
    import ahocorasick_rs

    fd, path = tempfile.mkstemp(prefix="ddpdoctor-gates-", suffix=".log")
    os.close(fd)
    try:
        size = make_log(path, args.size_mb)
        data = Path(path).read_bytes()
    finally:
        os.unlink(path)
    blocks = [data[i:i + CHUNK].lower() for i in range(0, len(data), CHUNK)]
    mb = size / 1e6
    lf, dfa = ahocorasick_rs.MatchKind.LeftmostFirst, ahocorasick_rs.Implementation.DFA
    print(f"{mb:.0f} MB make_log log, {len(blocks)} blocks of {CHUNK >> 20} MiB; best of {args.repeat}")
    print(f"{'words':>5} {'one':>8} {'64+rest':>8} {'even':>8} {'dfa':>8} {'hits':>6}   (CPU ms per 100 MB)")
    one_ms = {}
    for n in args.counts:
        ws = sorted(words(n), key=len)   # as Matcher._gate_list
        one = ahocorasick_rs.BytesAhoCorasick(ws, matchkind=lf)
        parts = [ahocorasick_rs.BytesAhoCorasick(ws[i:i + TEDDY_MAX], matchkind=lf) for i in range(0, n, TEDDY_MAX)]
        even = [ahocorasick_rs.BytesAhoCorasick(g, matchkind=lf) for g in groups(ws)]
        as_dfa = ahocorasick_rs.BytesAhoCorasick(ws, matchkind=lf, implementation=dfa)
        hits = sum(len(one.find_matches_as_indexes(b)) for b in blocks)

        def run(autos):
            return lambda: [a.find_matches_as_indexes(b) for b in blocks for a in autos]
        ms = [cpu(run(a), args.repeat) * 1e3 / mb * 100 for a in ([one], parts, even, [as_dfa])]
        one_ms[n] = ms[0]
        print(f"{n:>5} " + " ".join(f"{x:>8.0f}" for x in ms) + f" {hits:>6,}")
    ws = words(64)[:args.memmem_words]

    def memmem_pass():
        for b in blocks:
            for w in ws:
                pos = FIND(b, w, 0)
                while pos != -1:
                    pos = FIND(b, w, b.find(b"\n", pos) + 1 or len(b))
    t = cpu(memmem_pass, args.repeat)
    print(f"memmem ({FIND.__name__}): {t / len(ws) * 1e3 / mb * 100:.0f} ms CPU per word per 100 MB "
          f"({len(ws)} words); one automaton, per 100 MB: "
          + ", ".join(f"{n} words {ms:.0f} ms" for n, ms in one_ms.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
