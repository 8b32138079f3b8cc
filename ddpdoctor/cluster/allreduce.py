"""The pair test's all-reduce: the two nodes of a pair form a 2-rank Gloo process group and
all-reduce 1 MiB, as a job's first collective would.

The TCP probes and the 1 MiB transfer (peers.pair_tests) go to the address the *peer's name*
resolves to on this node. Gloo does not: each rank binds to the address *its own* hostname
resolves to (or GLOO_SOCKET_IFNAME's interface) and advertises it through the store, and the
peers dial that (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp createDefaultDevice;
gloo/transport/tcp/device.cc). A node whose hostname resolves to a decoy or loopback address
passes every probe and still fails the job's first collective; this test is that collective.

Each pair meets under its own key prefix in the cluster run's TCPStore, over a store connection
of its own (a blocking wait on the shared client would stall the node's publishing), and every
step is bounded by the probe timeout.
"""
from __future__ import annotations

import datetime
import os
import threading
import time
from typing import Any

NUMEL = 256 * 1024  # float32: 1 MiB, above Gloo's small-message path, well below any timeout


def pair_allreduce(store_host: str, store_port: int, prefix: str, rank: int, timeout: float) -> dict[str, Any]:
    """Join the 2-rank group under `prefix` as `rank` (0 or 1); all-reduce ones; check the sum.

    Returns {"ok", "seconds", "error"}; never raises, never outlives `2 * timeout + 1` seconds
    (the group is built in a daemon thread: a peer that never comes cannot hold this node)."""
    out: dict[str, Any] = {"ok": False, "seconds": 0.0, "error": "did not finish in time"}

    def run() -> None:
        t0 = time.monotonic()
        try:
            os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
            import torch
            import torch.distributed as dist
            from torch.distributed import PrefixStore, TCPStore

            td = datetime.timedelta(seconds=max(0.5, timeout))
            client = TCPStore(store_host, store_port, None, False, timeout=td)
            pg = dist.ProcessGroupGloo(PrefixStore(prefix, client), rank, 2, td)
            t = torch.ones(NUMEL)
            pg.allreduce([t]).wait()
            ok = bool(torch.all(t == 2.0))
            out.update(ok=ok, seconds=round(time.monotonic() - t0, 4),
                       error="" if ok else "the all-reduce returned a wrong sum")
        except Exception as e:  # noqa: BLE001 - torch raises RuntimeError / DistError subclasses
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            out.update(ok=False, seconds=round(time.monotonic() - t0, 4), error=first[:300])

    th = threading.Thread(target=run, name=f"pair-allreduce{prefix}", daemon=True)
    th.start()
    th.join(2 * timeout + 1.0)
    return dict(out)


def pair_prefix(tag: str, a: int, b: int) -> str:
    """The pair's own key space in the store ("ddpdoctor/cluster/<run>/round1/allreduce/2-5/"); both ends compute the same one."""
    lo, hi = sorted((a, b))
    return f"{tag}/allreduce/{lo}-{hi}/"
