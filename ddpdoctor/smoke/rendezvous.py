"""The smoke worker's rendezvous: the TCPStore (one client for the phases, a clone for the
watchdog), the hint when it cannot be reached, and the backend every rank agrees on."""
from __future__ import annotations

import datetime
from typing import Any, Callable, ContextManager

from ddpdoctor.smoke import plan as P


def connect_store(cfg: P.SmokeConfig, rank: int, master: str, port: int, agent_store: bool, prefix: str):
    """(store, monitor store): both under `prefix`; the monitor's short timeout keeps the watchdog responsive."""
    from torch.distributed import PrefixStore, TCPStore
    is_master = rank == 0 and not agent_store
    budget = cfg.budget
    store = TCPStore(master, port, None, is_master,
                     datetime.timedelta(seconds=budget.startup), wait_for_workers=False)
    store.set_timeout(datetime.timedelta(seconds=budget.phase))
    mon = store.clone()
    mon.set_timeout(datetime.timedelta(seconds=budget.monitor_store))
    return PrefixStore(prefix, store), PrefixStore(prefix, mon)


def store_hint(e: BaseException, rank: int, master: str, port: int, agent_store: bool) -> str:
    text = str(e).lower()
    if rank == 0 and not agent_store and ("address already in use" in text or "bind" in text):
        from ddpdoctor.probes.procs import listeners_on
        holders = "; ".join(f"pid {h.pid} ({h.name})" for h in listeners_on(port) if h.pid)
        return f"port {port} is already in use{' by ' + holders if holders else ''}: pick another MASTER_PORT"
    return f"rank {rank} could not reach the store at {master}:{port}: is rank 0 running? " \
           f"`ddpdoctor network --master {master} --port {port}` checks the path"


def multi_get(store, keys: list[str]) -> list[Any]:
    return store.multi_get(keys) if hasattr(store, "multi_get") else [store.get(k) for k in keys]


def agree_backend(store, cfg: P.SmokeConfig, rank: int, world: int, has_gpu: bool,
                  waiting: Callable[[], ContextManager]) -> str:
    """Every rank waits here until all have arrived (with the start-up allowance: a slow import
    elsewhere is not a hang), then all agree on the backend: NCCL when every rank has a GPU."""
    store.set(f"gpu/{rank}", "1" if has_gpu else "0")
    keys = [f"gpu/{r}" for r in range(world)]
    with waiting():
        store.wait(keys, datetime.timedelta(seconds=cfg.budget.startup))
    if cfg.backend != "auto":
        return cfg.backend
    return "nccl" if all(v == b"1" for v in multi_get(store, keys)) else "gloo"
