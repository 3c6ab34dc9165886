"""Billing periods: the window a quota allowance covers.

A subscriber's period is the provider's (Stripe's current_period_start/end), continued month by
month from the same anchor if the next one has not been recorded yet. Everyone else's is the
calendar month in UTC.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime

# Enough to walk from any stored period to today without looping forever on corrupt dates.
MAX_MONTHS_AHEAD = 12 * 50


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime

    @property
    def key(self) -> int:
        """A stable name for the period in cache keys."""
        return int(self.start.timestamp())

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


def add_months(moment: datetime, months: int) -> datetime:
    """The same day and time `months` later, on the month's last day when that day does not exist."""
    index = moment.month - 1 + months
    year, month = moment.year + index // 12, index % 12 + 1
    day = min(moment.day, calendar.monthrange(year, month)[1])
    return moment.replace(year=year, month=month, day=day)


def calendar_month(moment: datetime) -> Period:
    moment = moment.astimezone(UTC)
    start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return Period(start, add_months(start, 1))


def cycle_containing(start: datetime, end: datetime, moment: datetime) -> Period:
    """The billing cycle holding `moment`, counting whole months on from [start, end)."""
    if moment < end:
        return Period(start, end)
    months = 1
    cycle_start, cycle_end = end, add_months(start, 2)
    while moment >= cycle_end and months < MAX_MONTHS_AHEAD:
        months += 1
        cycle_start, cycle_end = cycle_end, add_months(start, months + 1)
    return Period(cycle_start, cycle_end)
