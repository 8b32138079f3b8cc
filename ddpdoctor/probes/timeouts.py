"""Run a blocking call with a timeout in a daemon thread.

`getaddrinfo`, `gethostbyaddr` and friends have no timeout of their own; a daemon thread that is
still stuck when we give up does not delay the process exit.
"""
from __future__ import annotations

import threading
from typing import Any, Callable


class ProbeTimeout(Exception):
    pass


def call_with_timeout(fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=target, name=f"probe-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    if not done.wait(timeout):
        raise ProbeTimeout(f"no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
