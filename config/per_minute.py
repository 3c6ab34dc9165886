"""Figures kept per minute for two hours, for the staff dashboard's last hour.

Some of what the dashboard shows is stored nowhere else: refusals (429, 503) are answered and
forgotten, and the engines' load is only ever the latest sample. These stores keep them per minute:

- `MinuteCounts`: events counted per minute (a Redis hash per minute, one field per kind of event),
  one at a time or several in one round trip;
- `MinutePeaks`: the largest value seen in each minute of gauges sampled now and then (a Redis sorted
  set per minute, written with ZADD GT so only a larger value replaces the one kept).

With Redis, every Daphne process and Celery worker adds to the same minutes. Without it (the embedded
default, one process) the minutes live in this process's memory. Either way a minute is kept for
KEEP_SECONDS and then forgotten, and reading an hour is one round trip.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from config.redis import async_client, sync_client

KEEP_SECONDS = 2 * 3600
KEY_PREFIX = "sglchat:per-minute"


def minute_of(moment: float) -> int:
    """The minute (since the Unix epoch) that a Unix time falls in."""
    return int(moment // 60)


class _LocalMinutes:
    """The embedded default's store: minute -> field -> value, pruned as minutes go by."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._minutes: dict[int, dict[str, int]] = {}

    def _prune(self, minute: int) -> None:
        oldest = minute - KEEP_SECONDS // 60
        for old in [m for m in self._minutes if m < oldest]:
            del self._minutes[old]

    def add(self, minute: int, field: str, amount: int) -> None:
        with self._lock:
            fields = self._minutes.setdefault(minute, {})
            fields[field] = fields.get(field, 0) + amount
            self._prune(minute)

    def peak(self, minute: int, values: Mapping[str, int]) -> None:
        with self._lock:
            fields = self._minutes.setdefault(minute, {})
            for field, value in values.items():
                fields[field] = max(fields.get(field, value), value)
            self._prune(minute)

    def read(self, first: int, minutes: int) -> list[dict[str, int]]:
        with self._lock:
            return [dict(self._minutes.get(minute, {})) for minute in range(first, first + minutes)]

    def clear(self) -> None:
        with self._lock:
            self._minutes.clear()


class _Minutes:
    def __init__(self, name: str) -> None:
        self.name = name
        self._local = _LocalMinutes()

    def _key(self, minute: int) -> str:
        return f"{KEY_PREFIX}:{self.name}:{minute}"

    def clear_local(self) -> None:
        """Forget the in-process minutes (tests of the embedded default)."""
        self._local.clear()


class MinuteCounts(_Minutes):
    """Events counted per minute, by kind (a field name)."""

    def add(self, field: str, amount: int = 1, *, now: float | None = None) -> None:
        minute = minute_of(time.time() if now is None else now)
        client = sync_client()
        if client is None:
            self._local.add(minute, field, amount)
            return
        key = self._key(minute)
        pipe = client.pipeline(transaction=False)
        pipe.hincrby(key, field, amount)
        pipe.expire(key, KEEP_SECONDS)
        pipe.execute()

    async def aadd_many(self, counts: Mapping[tuple[int, str], int]) -> None:
        """Several counts at once, (minute, field) -> amount, in one round trip."""
        client = async_client()
        if client is None:
            for (minute, field), amount in counts.items():
                self._local.add(minute, field, amount)
            return
        pipe = client.pipeline(transaction=False)
        for (minute, field), amount in counts.items():
            pipe.hincrby(self._key(minute), field, amount)
        for minute in {minute for minute, _ in counts}:
            pipe.expire(self._key(minute), KEEP_SECONDS)
        await pipe.execute()

    def read(self, first: int, minutes: int) -> list[dict[str, int]]:
        """Each minute's counts from minute `first`, oldest first (an empty dict: nothing counted)."""
        client = sync_client()
        if client is None:
            return self._local.read(first, minutes)
        pipe = client.pipeline(transaction=False)
        for minute in range(first, first + minutes):
            pipe.hgetall(self._key(minute))
        return [{field: int(value) for field, value in row.items()} for row in pipe.execute()]


class MinutePeaks(_Minutes):
    """The largest value of each gauge (a field name) seen in each minute."""

    def record(self, values: Mapping[str, int], *, now: float | None = None) -> None:
        if not values:
            return
        minute = minute_of(time.time() if now is None else now)
        client = sync_client()
        if client is None:
            self._local.peak(minute, values)
            return
        key = self._key(minute)
        pipe = client.pipeline(transaction=False)
        pipe.zadd(key, dict(values), gt=True)
        pipe.expire(key, KEEP_SECONDS)
        pipe.execute()

    def read(self, first: int, minutes: int) -> list[dict[str, int]]:
        """Each minute's peaks from minute `first`, oldest first (an empty dict: no sample that minute)."""
        client = sync_client()
        if client is None:
            return self._local.read(first, minutes)
        pipe = client.pipeline(transaction=False)
        for minute in range(first, first + minutes):
            pipe.zrange(self._key(minute), 0, -1, withscores=True)
        return [{field: int(score) for field, score in row} for row in pipe.execute()]
