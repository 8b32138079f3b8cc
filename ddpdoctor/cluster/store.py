"""The c10d TCPStore every node of a `cluster` run publishes in, polled without blocking."""
from __future__ import annotations

import datetime
import json
import os
import time
from typing import Any, Sequence

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


def gather(store, world: int, until: float) -> dict[int, dict]:
    """Every node's record by index, waiting until `until`; missing nodes are absent."""
    while time.monotonic() < until:
        try:
            if int(store.add("results", 0)) >= world:
                break
        except Exception:  # noqa: BLE001
            break
        time.sleep(0.05)
    out: dict[int, dict] = {}
    for j in range(world):
        key = f"result/{j}"
        if has(store, key):
            out[j] = peer_record(store.get(key))
        elif has(store, f"hello/{j}"):
            out[j] = {**peer_record(store.get(f"hello/{j}")), "unfinished": True}
    return out


_SCALARS = (str, int, float, bool, type(None))
_SCALAR_SECTIONS = ("versions", "settings", "env")  # compared across nodes: values must hash


def peer_record(raw: bytes) -> dict:
    """A node's record as the first node may use it. Any process that reaches the store can write
    there: a record that is not JSON, nests past the stack or holds other types than the view reads
    (ClusterView, the DD71x checks) comes back as {"malformed": why, "unfinished": True}, or with the
    ill-typed parts dropped, never as a value that crashes the verdict for every node."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        return {"malformed": f"not a JSON record ({type(e).__name__})", "unfinished": True}
    if not isinstance(data, dict):
        return {"malformed": "not a JSON object", "unfinished": True}
    out: dict = {}
    for k, v in data.items():
        if k in ("node", "hostname"):
            if isinstance(v, str):
                out[k] = v[:253]
        elif k == "probes":
            if isinstance(v, dict):
                out[k] = {j: p for j, p in v.items() if j.isascii() and j.isdigit() and len(j) <= 9 and isinstance(p, dict)}
        elif k == "local":
            if isinstance(v, list):
                out[k] = [x for x in v if isinstance(x, dict)]
        elif k in _SCALAR_SECTIONS:
            if isinstance(v, dict):
                out[k] = {kk: vv for kk, vv in v.items() if isinstance(vv, _SCALARS)}
        elif k == "addr_mtu":  # address -> MTU (DD719 compares them as ints)
            if isinstance(v, dict):
                out[k] = {a: m for a, m in v.items() if type(m) is int and 0 < m < 1 << 20}
        elif k == "timing":
            if isinstance(v, dict):
                out[k] = v
        elif k == "unfinished":
            out[k] = v is True
        else:
            out[k] = v
    return out
