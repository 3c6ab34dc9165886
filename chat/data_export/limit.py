"""How often one user may download their data export (DATA_EXPORT_RATE_LIMIT).

A moving window from the `limits` library, as the plans' rate limits use: in Redis on the process's
shared pool wherever REDIS_URL is set, in process memory otherwise (the embedded default). A refusal
says exactly when the next download will pass.
"""

from __future__ import annotations

import math
import threading
import time

import limits
from django.conf import settings
from limits.errors import StorageError
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import MovingWindowRateLimiter

from accounts.models import User
from config import redis as shared_redis
from config.refusals import Busy, RateLimited

KEY_PREFIX = "sglchat:export"
SCOPE = "data-export"
_PER = {"second": "a second", "minute": "a minute", "hour": "an hour", "day": "a day", "month": "a month",
        "year": "a year"}

_lock = threading.Lock()
_limiters: dict[str | None, MovingWindowRateLimiter] = {}


def _limiter() -> MovingWindowRateLimiter:
    url = settings.REDIS_URL or None
    with _lock:
        limiter = _limiters.get(url)
        if limiter is None:
            if url:
                storage = RedisStorage("redis://", connection_pool=shared_redis.sync_pool(url),
                                       key_prefix=KEY_PREFIX, wrap_exceptions=True)
            else:
                storage = MemoryStorage()
            limiter = _limiters[url] = MovingWindowRateLimiter(storage)
    return limiter


def allowance() -> str:
    """The limit in words: "3 times an hour"."""
    rate = limits.parse(settings.DATA_EXPORT_RATE_LIMIT)
    unit = rate.GRANULARITY.name
    per = _PER[unit] if rate.multiples == 1 else f"every {rate.multiples} {unit}s"
    return f"{rate.amount} time{'s' if rate.amount != 1 else ''} {per}"


def _wait(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    if minutes < 120:
        return f"{minutes} minutes"
    return f"{math.ceil(minutes / 60)} hours"


def count_download(user: User) -> None:
    """Count one download; RateLimited (429, with Retry-After) beyond the limit, Busy (503) when the
    store cannot be reached. A refused download is not counted."""
    if not settings.RATELIMIT_ENABLE:
        return
    rate = limits.parse(settings.DATA_EXPORT_RATE_LIMIT)
    limiter = _limiter()
    who = f"user:{user.pk}"
    try:
        if limiter.hit(rate, SCOPE, who):
            return
        reset_time = limiter.get_window_stats(rate, SCOPE, who).reset_time
    except StorageError as error:
        raise Busy("Downloads cannot be counted right now. Try again in a few seconds.", retry_after=5) from error
    retry_after = max(1, math.ceil(reset_time - time.time()))
    raise RateLimited(
        f"You can download your data {allowance()}. The next download can start in {_wait(retry_after)}.",
        retry_after=retry_after,
    )
