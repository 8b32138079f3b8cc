"""`lazy`: a per-instance cached property that is safe when checks in several threads ask at once.

Facts are gathered once and shared: the first check to ask does the work, the others wait for it.
(functools.cached_property lost its lock in Python 3.12.)
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class lazy(Generic[T]):  # noqa: N801 - used like a property
    def __init__(self, fn: Callable[[Any], T]):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        cache = obj.__dict__
        if self.name in cache:
            return cache[self.name]
        locks = cache.setdefault("_lazy_locks", {})
        lock = locks.setdefault(self.name, threading.Lock())  # dict.setdefault is atomic under the GIL
        with lock:
            if self.name not in cache:
                cache[self.name] = self.fn(obj)
        return cache[self.name]
