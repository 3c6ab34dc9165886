"""Admission control: shed load before it reaches a saturated engine, free tier first.

Every generation in flight, a web answer or an API completion, holds a lease in one count shared
by every process: a sorted set in Redis (member: the generation's request id; score: when its lease
runs out), or this process's memory in the embedded default. Admitting is one atomic step (drop
lapsed leases, count, compare with the thresholds, add), so two processes cannot both take the last
place. A running generation renews its lease with its heartbeat and gives it back when it ends; the
lease of a process that died simply runs out, so a crash never leaves the count too high for long.

Above ADMISSION_SOFT_LIMIT only premium requests are admitted; above ADMISSION_HARD_LIMIT nobody
is, and each refusal says when to try again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable

from django.conf import settings

from chat.generation.streams import heartbeat_ttl
from config.redis import async_client, sync_client
from config.refusals import Busy

PREMIUM = "premium"
KEY = "sglchat:inflight"

ADMIT_SCRIPT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[5]) then return {0, n} end
if n >= tonumber(ARGV[4]) and ARGV[6] ~= '1' then return {-1, n} end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
return {1, n + 1}
"""

EVERYONE_BUSY = "Every model server is busy right now. Retrying shortly."
FREE_SHED = "The servers are busy, and paid plans go first at busy times. Retrying shortly."


def _lease_until(now: float) -> float:
    return now + heartbeat_ttl()


class _LocalLeases:
    """The same count in this process's memory (the embedded default runs one process)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._leases: dict[str, float] = {}

    def admit(self, generation_id: str, soft: int, hard: int, premium: bool) -> tuple[int, int]:
        now = time.time()
        with self._lock:
            self._leases = {gid: until for gid, until in self._leases.items() if until > now}
            count = len(self._leases)
            if count >= hard:
                return 0, count
            if count >= soft and not premium:
                return -1, count
            self._leases[generation_id] = _lease_until(now)
            return 1, count + 1

    def renew(self, generation_ids: Iterable[str]) -> None:
        until = _lease_until(time.time())
        with self._lock:
            for gid in generation_ids:
                if gid in self._leases:
                    self._leases[gid] = until

    def release(self, generation_id: str) -> None:
        with self._lock:
            self._leases.pop(generation_id, None)

    def count(self) -> int:
        now = time.time()
        with self._lock:
            return sum(1 for until in self._leases.values() if until > now)

    def clear(self) -> None:
        with self._lock:
            self._leases.clear()


_local = _LocalLeases()
_admit_script = None


def _admit_on(client, *args) -> int:
    global _admit_script
    if _admit_script is None:
        _admit_script = client.register_script(ADMIT_SCRIPT)
    verdict, _ = _admit_script(keys=[KEY], args=list(args), client=client)
    return int(verdict)


def admit_request(priority_class: str, generation_id: str) -> None:
    """Take a place for `generation_id`, or raise Busy (503 with Retry-After) when there is none for
    this class of request."""
    soft, hard, premium = settings.ADMISSION_SOFT_LIMIT, settings.ADMISSION_HARD_LIMIT, priority_class == PREMIUM
    client = sync_client()
    if client is None:
        verdict, _ = _local.admit(generation_id, soft, hard, premium)
    else:
        now = time.time()
        verdict = _admit_on(client, now, _lease_until(now), generation_id, soft, hard, "1" if premium else "0")
    if verdict == 0:
        raise Busy(EVERYONE_BUSY, retry_after=5)
    if verdict == -1:
        raise Busy(FREE_SHED, retry_after=10)


async def renew(generation_ids: Iterable[str]) -> None:
    """Extend the leases of generations that are still running (their heartbeat calls this)."""
    ids = list(generation_ids)
    if not ids:
        return
    client = async_client()
    if client is None:
        _local.renew(ids)
        return
    until = _lease_until(time.time())
    await client.zadd(KEY, dict.fromkeys(ids, until), xx=True)


async def release(generation_id: str) -> None:
    client = async_client()
    if client is None:
        _local.release(generation_id)
    else:
        await client.zrem(KEY, generation_id)


def release_now(generation_id: str) -> None:
    """`release` from synchronous code (a request refused after it was admitted)."""
    client = sync_client()
    if client is None:
        _local.release(generation_id)
    else:
        client.zrem(KEY, generation_id)


def in_flight() -> int:
    """Generations holding a live lease now (for staff pages and tests)."""
    client = sync_client()
    if client is None:
        return _local.count()
    return client.zcount(KEY, time.time(), "+inf")


async def _renew_until_cancelled(generation_id: str) -> None:
    while True:
        await asyncio.sleep(heartbeat_ttl() / 3)
        await renew([generation_id])


def keep_leased(generation_id: str) -> asyncio.Task:
    """Renew `generation_id`'s lease until the returned task is cancelled (for generations without a
    runner's heartbeat: API completions)."""
    return asyncio.get_running_loop().create_task(_renew_until_cancelled(generation_id))
