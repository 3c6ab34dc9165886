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
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from limits.errors import StorageError

from accounts.models import User
from billing.services.rate_limits import moving_window_limiter
from config.refusals import Busy, RateLimited

SCOPE = "data-export"


def allowance() -> str:
    """The limit in words: "3 times an hour" (a phrase the Your data page and the refusal put in a sentence)."""
    rate = limits.parse(settings.DATA_EXPORT_RATE_LIMIT)
    unit, count, every = rate.GRANULARITY.name, rate.amount, rate.multiples
    values = {"count": count, "every": every}
    if every != 1:
        if unit == "second":
            phrase = ngettext(
                "%(count)s time every %(every)s seconds", "%(count)s times every %(every)s seconds", count
            )
        elif unit == "minute":
            phrase = ngettext(
                "%(count)s time every %(every)s minutes", "%(count)s times every %(every)s minutes", count
            )
        elif unit == "hour":
            phrase = ngettext("%(count)s time every %(every)s hours", "%(count)s times every %(every)s hours", count)
        elif unit == "day":
            phrase = ngettext("%(count)s time every %(every)s days", "%(count)s times every %(every)s days", count)
        elif unit == "month":
            phrase = ngettext("%(count)s time every %(every)s months", "%(count)s times every %(every)s months", count)
        else:
            phrase = ngettext("%(count)s time every %(every)s years", "%(count)s times every %(every)s years", count)
    elif unit == "second":
        phrase = ngettext("%(count)s time a second", "%(count)s times a second", count)
    elif unit == "minute":
        phrase = ngettext("%(count)s time a minute", "%(count)s times a minute", count)
    elif unit == "hour":
        phrase = ngettext("%(count)s time an hour", "%(count)s times an hour", count)
    elif unit == "day":
        phrase = ngettext("%(count)s time a day", "%(count)s times a day", count)
    elif unit == "month":
        phrase = ngettext("%(count)s time a month", "%(count)s times a month", count)
    else:
        phrase = ngettext("%(count)s time a year", "%(count)s times a year", count)
    return phrase % values


def _wait(seconds: int) -> str:
    if seconds < 60:
        return ngettext("%(count)s second", "%(count)s seconds", seconds) % {"count": seconds}
    minutes = math.ceil(seconds / 60)
    if minutes < 120:
        return ngettext("%(count)s minute", "%(count)s minutes", minutes) % {"count": minutes}
    hours = math.ceil(minutes / 60)
    return ngettext("%(count)s hour", "%(count)s hours", hours) % {"count": hours}


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
        raise Busy(_("Downloads cannot be counted right now. Try again in a few seconds."), retry_after=5) from error
    retry_after = max(1, math.ceil(reset_time - time.time()))
    raise RateLimited(
        _("You can download your data %(allowance)s. The next download can start in %(wait)s.")
        % {"allowance": allowance(), "wait": _wait(retry_after)},
        retry_after=retry_after,
    )
