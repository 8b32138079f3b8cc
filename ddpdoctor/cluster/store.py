"""The c10d TCPStore every node of a `cluster` run publishes in, polled without blocking."""
from __future__ import annotations

import datetime
import json
import os
import time
from typing import Any, Sequence

from ddpdoctor.facts.noderecord import Hello, MalformedRecord, NodeRecord

KEY_PREFIX = "ddpdoctor/cluster"


class StoreError(Exception):
    pass


def run_prefix(launch) -> str:
    """This run's key space in the store ("ddpdoctor/cluster/<job>.<step>/"): several runs may share it."""
    return f"{KEY_PREFIX}/{launch.run_id}/"


def connect_store(launch, timeout: float):
    """The c10d TCPStore every node publishes in (torch imported here, and only here)."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # no C++ warnings for our polling
    from torch.distributed import PrefixStore, TCPStore

    td = datetime.timedelta(seconds=max(1.0, timeout))
    try:
        if launch.host_store:
            store = TCPStore(launch.store_host, launch.store_port, None, True, timeout=td, wait_for_workers=False)
        else:
            store = TCPStore(launch.store_host, launch.store_port, None, False, timeout=td)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError / DistNetworkError / DistStoreError
        what = "host" if launch.host_store else "reach"
        raise StoreError(f"could not {what} the store at {launch.store_host}:{launch.store_port}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return PrefixStore(run_prefix(launch), store)


def has(store, key: str) -> bool:
    return bool(store.check([key]))


def get_json(store, key: str) -> Any:
    return json.loads(store.get(key).decode())


def wait_keys(store, keys: Sequence[str], until: float, poll: float = 0.05) -> set[str]:
    """The keys present by `until` (monotonic), polled without blocking (no C++ timeout warnings)."""
    have: set[str] = set()
    while True:
        for k in keys:
            if k not in have and has(store, k):
                have.add(k)
        if len(have) == len(keys) or time.monotonic() >= until:
            return have
        time.sleep(poll)


def read_json(store, key: str) -> Any:
    """The JSON value under `key`; MalformedRecord when it is not JSON (another version, a damaged value)."""
    raw = store.get(key)
    try:
        return json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise MalformedRecord(f"{key} is not JSON: {str(e)[:60]}") from None


def read_hello(store, j: int) -> Hello | None:
    """Node j's hello, typed; None when it cannot be read (its peers then probe it by the launcher's name)."""
    try:
        return Hello.from_wire(read_json(store, f"hello/{j}"))
    except MalformedRecord:
        return None


def peer_record(raw: bytes, j: int, key: str = "result", **extra) -> NodeRecord:
    """Node j's record from the bytes any process that reaches the store may have written: typed once;
    one that is not JSON, nests past the stack or holds other types says why (never a crash)."""
    try:
        value = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        return NodeRecord(j, "", malformed=f"{key} is not JSON: {str(e)[:60]}")
    return NodeRecord.from_wire({**value, **extra} if isinstance(value, dict) else value, j)


def _record(store, key: str, j: int, **extra) -> NodeRecord:
    return peer_record(store.get(key), j, key, **extra)


def gather(store, world: int, until: float) -> dict[int, NodeRecord]:
    """Every node's record by index, typed once here (facts/noderecord.py), waiting until `until`;
    missing nodes are absent, a node whose record cannot be read has one that says why."""
    while time.monotonic() < until:
        try:
            if int(store.add("results", 0)) >= world:
                break
        except Exception:  # noqa: BLE001
            break
        time.sleep(0.05)
    out: dict[int, NodeRecord] = {}
    for j in range(world):
        key = f"result/{j}"
        if has(store, key):
            out[j] = _record(store, key, j)
        elif has(store, f"hello/{j}"):
            out[j] = _record(store, f"hello/{j}", j, unfinished=True)
    return out
