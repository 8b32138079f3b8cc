"""The smoke worker's fault-injection test hook (documented in docs/smoke.md, used by the smoke tests).

DDPDOCTOR_SMOKE_FAULT="stop:rank=1:phase=all_reduce" makes rank 1 SIGSTOP itself on entering the
first phase whose name starts with "all_reduce". Actions: stop, kill (SIGKILL), exit (code 7),
hang (sleep in the main thread), raise, zero (contribute zeros to that all_reduce). Several
faults: separate them with ';'.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Iterator

FAULT_VAR = "DDPDOCTOR_SMOKE_FAULT"


def parse_faults(spec: str | None) -> list[dict[str, Any]]:
    out = []
    for part in (spec or "").split(";"):
        if not part.strip():
            continue
        action, *kv = part.strip().split(":")
        f = {"action": action, "rank": None, "phase": "", "fired": False}
        for item in kv:
            k, _, v = item.partition("=")
            f[k] = int(v) if k == "rank" else v
        out.append(f)
    return out


def due(faults: list[dict[str, Any]], rank: int, phase: str) -> Iterator[dict[str, Any]]:
    """The faults that fire on entering `phase`, each marked fired as it is handed out (once)."""
    for f in faults:
        if not f["fired"] and f["rank"] in (None, rank) and phase.startswith(f["phase"]):
            f["fired"] = True
            yield f


def fire(action: str, phase: str) -> bool:
    """Do `action` to this process. Returns True for "zero" (the caller zeroes its contribution)."""
    if action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "exit":
        os._exit(7)
    elif action == "hang":
        while True:
            time.sleep(3600)
    elif action == "raise":
        raise RuntimeError(f"injected fault in phase {phase!r}")
    return action == "zero"
