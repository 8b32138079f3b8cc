"""Flight-recorder dumps and the NCCL watchdog's per-rank lines: which rank a hung job waits for.

Stable API (used by `explain --fr` and by `inspect`; documented in docs/flight-recorder.md):

    dumps, skipped = load_dir(path)      # list[RankDump] sorted by rank, notes on files skipped; BadDump
    verdict = analyze(dumps, skipped)    # Divergence: per process group, the first diverging collective
    load_file(path) -> RankDump          # one dump (pickle or JSON), loaded without executing code
    watchdog.scan(lines) -> WatchdogView # the watchdog's "last enqueued / last completed" lines of a log

Nothing here imports torch.
"""
from ddpdoctor.flightrec.divergence import analyze
from ddpdoctor.flightrec.dumps import load_dir, load_file
from ddpdoctor.flightrec.entries import Entry
from ddpdoctor.flightrec.model import BadDump, Divergence, OpVariant, PGVerdict, RankDump

__all__ = ["analyze", "load_dir", "load_file", "BadDump", "Divergence", "Entry", "OpVariant", "PGVerdict",
           "RankDump"]
