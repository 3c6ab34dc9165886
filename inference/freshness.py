"""A value read at most once per INFERENCE_FLEET_REFRESH_SECONDS in each process.

What the path of every message reads about the fleet (the node snapshot, the rollout routes) comes
from the database and Redis; this keeps those reads to one per interval per process, and lets an
admin change drop the copy at once in the process that made it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from django.conf import settings

T = TypeVar("T")


class Fresh(Generic[T]):
    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._cached: tuple[float, T] | None = None

    def get(self) -> T:
        now = time.monotonic()
        with self._lock:
            cached = self._cached
        if cached is not None and cached[0] > now:
            return cached[1]
        value = self._read()
        with self._lock:
            self._cached = (now + settings.INFERENCE_FLEET_REFRESH_SECONDS, value)
        return value

    def invalidate(self) -> None:
        with self._lock:
            self._cached = None
