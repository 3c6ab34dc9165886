"""Requests a user made a while ago, counted by the real limiter (and store) with its clock set back.

A live test can then meet a rate limit that lifts in a few seconds instead of a whole minute,
without waiting on anything but the page's own state.
"""

import time
from unittest import mock

from billing.models import Plan
from billing.services import check_rate_limit


def requests_made(user, plan: Plan, *, seconds_ago: float, count: int = 1, scope: str = "chat") -> None:
    then = time.time() - seconds_ago
    with mock.patch("time.time", return_value=then):
        for _ in range(count):
            check_rate_limit(user=user, plan=plan, scope=scope)
