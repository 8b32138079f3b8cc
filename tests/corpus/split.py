"""The frozen dev / held-out split of the real-world corpus (see README.md).

A thread (its URL) goes to held-out when the first 8 hex digits of sha256("<SEED>:<thread url>")
taken mod 3 are 0 (one third, uniformly at random under the fixed seed), to dev otherwise. The
split depends only on the thread, so all logs of one thread share a split, and adding threads
later never moves an old one.
"""
from __future__ import annotations

import hashlib

SEED = 20261125
HELDOUT_MOD = 3


def split_of(thread: str) -> str:
    h = hashlib.sha256(f"{SEED}:{thread}".encode()).hexdigest()
    return "heldout" if int(h[:8], 16) % HELDOUT_MOD == 0 else "dev"
