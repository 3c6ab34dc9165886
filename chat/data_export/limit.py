"""How often one user may download their data export (DATA_EXPORT_RATE_LIMIT).

A moving window on the same limiter as the plans' rate limits (billing.services.rate_limits), under its
own scope: in Redis wherever REDIS_URL is set, in process memory otherwise (the embedded default). A refusal
says exactly when the next download will pass.
"""

from __future__ import annotations

import math
import time

import limits
from django.conf import settings
from limits.errors import StorageError

from accounts.models import User
from billing.services.rate_limits import moving_window_limiter
from config.refusals import Busy, RateLimited

SCOPE = "data-export"
_PER = {
    "second": "a second",
    "minute": "a minute",
    "hour": "an hour",
    "day": "a day",
    "month": "a month",
    "year": "a year",
}


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
    limiter = moving_window_limiter()
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
