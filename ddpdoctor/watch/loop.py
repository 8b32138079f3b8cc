"""The watch loop: observe every tick, judge, print each event the moment it happens, stop when the job ends.

Stops when every rank it watched is gone (the job ended), at --deadline, or on Ctrl-C / SIGTERM; the
summary is printed in every case. Exit code: 0 the job ended (or the watch stopped) with no hang,
straggler or failed rank; 1 one of those happened.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable, Iterable

from ddpdoctor.watch import frfeed
from ddpdoctor.watch.judge import Judge

TICK_S = 1.0
DEBUG = bool(os.environ.get("DDPDOCTOR_WATCH_DEBUG"))  # print the straggler shares on stderr
EVENTS_FILE = "watch-events.jsonl"
BAD_KINDS = ("hang", "straggler")


def events_path(rank_envs: Iterable[dict]) -> str | None:
    """The armed directory of the job (its ranks' TORCH_FR_DUMP_TEMP_FILE, as `ddpdoctor arm` sets it):
    events go there so that `explain` finds them after the job died."""
    from ddpdoctor.inspect.armed import dump_dirs
    dirs = dump_dirs([{"env": e} for e in rank_envs])
    for d in dirs:
        if os.path.isdir(d) and os.access(d, os.W_OK):
            return os.path.join(d, EVENTS_FILE)
    return None


class Stop(Exception):
    pass


def _on_term(signum, frame):
    raise Stop()


def exit_code(counts: dict, gone_bad: bool) -> int:
    return 1 if gone_bad or any(counts.get(k) for k in BAD_KINDS) else 0


def run(source, emit: Callable[[dict[str, Any]], None], *, deadline: float | None, judge: Judge | None = None,
        events_file: str | None = None, tick: float = TICK_S) -> int:
    """`source` has observe(now, want_stacks) -> list of rank dicts, ended() -> bool, close().
    Every event goes to `emit` (printing) and, when known, is appended to `events_file`."""
    judge = judge or Judge()
    t0 = time.monotonic()
    wall0 = time.time()
    old = signal.signal(signal.SIGTERM, _on_term)
    gone_bad = False
    end = "job ended"
    feed = frfeed.for_source(source)  # armed job: the flight recorder's dumps name the hang too

    def out(e):
        e = {**e, "wall": wall0 + (e["t"] - t0)}
        emit(e)
        if events_file:
            try:
                with open(events_file, "a") as f:
                    from ddpdoctor.render.watch import to_json
                    f.write(to_json(e) + "\n")
            except OSError:
                pass  # the job's directory went away: printing still works
    try:
        while True:
            now = time.monotonic()
            obs = source.observe(now, judge.wants_stacks(now))
            for e in judge.feed(obs, now):
                if e["kind"] == "rank_gone" and e.get("exit_status") not in (0, None):
                    gone_bad = True
                out(e)
            for e in frfeed.events(feed, now, obs):
                gone_bad = True
                out(e)
            if DEBUG and int(now - t0) % 5 == 0:
                import sys
                print({k[1]: {a: (round(b, 3) if isinstance(b, float) else b) for a, b in v.items()}
                       for k, v in judge.shares(now).items()},
                      file=sys.stderr, flush=True)
            if source.ended():
                break
            if deadline is not None and now - t0 >= deadline:
                end = "deadline"
                break
            time.sleep(max(0.0, tick - (time.monotonic() - now)))
    except (KeyboardInterrupt, Stop):
        end = "interrupted"
    finally:
        signal.signal(signal.SIGTERM, old)
        source.close()
    now = time.monotonic()
    for e in frfeed.events(feed, now, final=True):  # dumps written as the job died
        gone_bad = True
        out(e)
    out({**judge.summary(now), "end": end})
    return exit_code(judge.counts, gone_bad)

