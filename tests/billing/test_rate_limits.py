"""Rate limits: the plan sets the rate, one service decides, and pages answer 429 with Retry-After.

The rule is a moving window: at most the plan's number in any 60 seconds, wherever a burst falls,
and Retry-After is the time until the oldest counted request leaves the window. The rule tests run
on a stand-in clock (the real Redis and the in-process store both read `time.time`), so they take
milliseconds and never depend on when they start.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.urls import reverse

from billing.models import Plan
from billing.services import acheck_rate_limit, check_rate_limit, rate_limits
from config.refusals import Busy, RateLimited
from tests.billing.conftest import subscribe


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """`time.time` under the test's control, starting on a whole minute (a fixed window's edge)."""
    clock = Clock(float(int(time.time()) // 60 * 60))
    monkeypatch.setattr(time, "time", clock)
    return clock


@pytest.fixture
def tight_limits(plans):
    """Free: 3 requests a minute, Plus: 4, Pro: 6 (small numbers keep the tests short)."""
    for slug, rate in (("free", 3), ("plus", 4), ("pro", 6)):
        Plan.objects.filter(slug=slug).update(requests_per_minute=rate)


@pytest.fixture(params=["redis", "memory"])
def store(request, settings):
    """Redis (REDIS_URL set, production) or the in-process store (the embedded default)."""
    if request.param == "memory":
        settings.REDIS_URL = None
        rate_limits._limiters.pop(None, None)  # a fresh in-process store for this test
    yield request.param
    rate_limits._limiters.pop(None, None)


@contextlib.contextmanager
def event_loop():
    """One event loop for a test; the database connection its plan look-ups opened (on asgiref's
    thread) is closed at the end, so the test database can be dropped."""
    with asyncio.Runner() as runner:
        try:
            yield runner
        finally:
            runner.run(sync_to_async(connections.close_all)())


@pytest.fixture(params=["sync", "async"])
def check(request):
    """check_rate_limit, or its async twin run on one event loop for the whole test."""
    if request.param == "sync":
        yield check_rate_limit
        return
    with event_loop() as runner:
        yield lambda **who: runner.run(acheck_rate_limit(**who))


def attempt(check, **who) -> int | None:
    """None when the request passes, else the refusal's Retry-After."""
    try:
        check(**who)
    except RateLimited as refusal:
        assert refusal.status == 429
        return refusal.retry_after
    return None


def allowed_in_a_row(check=check_rate_limit, **who) -> tuple[int, RateLimited]:
    """How many requests pass before the first refusal (and the refusal itself)."""
    for n in range(100):
        try:
            check(**who)
        except RateLimited as refusal:
            return n, refusal
    raise AssertionError("never limited")


# --- The rule, on both stores and both paths ----------------------------------------------------------------


def test_no_more_than_the_plans_number_passes_in_any_60_seconds_wherever_the_burst_falls(
    transactional_db, tight_limits, free_user, clock, store, check
):
    minute = clock.now
    # Bursts that start on a minute's edge, 20 s after one and 40 s after one: a fixed one-minute
    # window would let a second burst through at its next edge, whatever that edge is.
    for n, start in enumerate((0, 20, 40)):
        first = minute + 120 * n + start
        for offset in (0, 10, 20):
            clock.now = first + offset
            assert attempt(check, user=free_user) is None

        # Refused for the rest of the minute after the first request, each time told exactly how long
        # is left until that first request leaves the window.
        for second in range(21, 60):
            clock.now = first + second
            assert attempt(check, user=free_user) == 60 - second

        clock.now = first + 60.5  # the first request has left the window: one more passes
        assert attempt(check, user=free_user) is None
        clock.now = first + 61  # and now the oldest counted is the one made at +10
        assert attempt(check, user=free_user) == 9


def test_retry_after_is_rounded_up_and_never_zero(transactional_db, tight_limits, free_user, clock, store, check):
    start = clock.now
    for _ in range(3):
        check(user=free_user)
    clock.now = start + 30.2
    assert attempt(check, user=free_user) == math.ceil(29.8)  # 30: after 29 s it would still be refused
    clock.now = start + 59.999
    assert attempt(check, user=free_user) == 1


def test_the_sync_and_async_paths_count_in_one_window(transactional_db, tight_limits, free_user, clock, store):
    with event_loop() as runner:
        check_rate_limit(user=free_user)
        runner.run(acheck_rate_limit(user=free_user))
        check_rate_limit(user=free_user)
        with pytest.raises(RateLimited):
            runner.run(acheck_rate_limit(user=free_user))
        with pytest.raises(RateLimited):
            check_rate_limit(user=free_user)


def test_an_unreachable_store_is_busy_with_retry_after_not_an_error(tight_limits, free_user, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    with pytest.raises(Busy) as refused:
        check_rate_limit(user=free_user)
    assert refused.value.status == 503 and refused.value.retry_after > 0
    with event_loop() as runner, pytest.raises(Busy) as refused:
        runner.run(acheck_rate_limit(user=free_user, plan=Plan.objects.get(slug="free")))
    assert refused.value.status == 503 and refused.value.retry_after > 0


# --- What the limit is and whom it counts -----------------------------------------------------------------


def test_the_limit_is_the_plans_and_the_refusal_names_it_and_the_plan_that_lifts_it(
    tight_limits, free_user, pro_user, clock
):
    free_count, free_refusal = allowed_in_a_row(user=free_user)
    pro_count, pro_refusal = allowed_in_a_row(user=pro_user)

    assert (free_count, pro_count) == (3, 6)
    assert free_refusal.status == 429
    assert free_refusal.retry_after == 60
    assert "limit of 3 requests a minute of the Free plan" in free_refusal.message
    assert "Try again in 60 seconds" in free_refusal.message
    assert "upgrade to Plus for 4 a minute" in free_refusal.message
    assert "limit of 6 requests a minute of the Pro plan" in pro_refusal.message
    assert "upgrade" not in pro_refusal.message  # nothing above Pro


def test_users_and_anonymous_addresses_each_have_their_own_window(tight_limits, free_user, other_user):
    assert allowed_in_a_row(user=free_user)[0] == 3
    # Another user and an anonymous address are counted apart.
    assert allowed_in_a_row(user=other_user)[0] == 3
    assert allowed_in_a_row(user=None, ip="203.0.113.9")[0] == 3


def test_the_api_window_is_the_users_whatever_key_each_request_carries(
    transactional_db, tight_limits, free_user, other_user, clock, store, check
):
    # One user's API requests share one window of the plan's number, however many keys they spread
    # over: a second key (or a tenth) is not a second minute's worth.
    for key_id in (11, 12, 11):
        assert attempt(check, user=free_user, api_key_id=key_id, scope="api") is None
    for key_id in (11, 12, 13):
        assert attempt(check, user=free_user, api_key_id=key_id, scope="api") == 60
    with pytest.raises(RateLimited) as refused:
        check(user=free_user, api_key_id=14, scope="api")
    assert refused.value.message.startswith(
        "You reached the limit of 3 requests a minute of the Free plan on the API, all your keys together."
    )
    # Another user's key has its own window, as does the same user's web chat (scope "chat").
    assert attempt(check, user=other_user, api_key_id=21, scope="api") is None
    assert attempt(check, user=free_user, scope="chat") is None


def test_an_ipv6_client_is_limited_per_network_not_per_address(tight_limits):
    for n in range(3):
        check_rate_limit(user=None, ip=f"2001:db8:1:2::{n + 1}")
    with pytest.raises(RateLimited) as refused:
        check_rate_limit(user=None, ip="2001:db8:1:2::ffff")
    assert "sign in and choose Plus" in refused.value.message
    check_rate_limit(user=None, ip="2001:db8:1:3::1")  # the next /64 is someone else


def test_each_scope_has_its_own_window_shared_by_every_transport(tight_limits, free_user):
    assert allowed_in_a_row(user=free_user, scope="chat")[0] == 3
    assert allowed_in_a_row(user=free_user, scope="billing")[0] == 3


def test_upgrading_raises_the_limit_at_once_and_the_minutes_requests_still_count(tight_limits, free_user, plans, clock):
    assert allowed_in_a_row(user=free_user)[0] == 3

    subscribe(free_user, plans["pro"])

    # Pro allows 6 in any minute: the 3 just made count, so 3 more pass now (not a fresh 6).
    assert allowed_in_a_row(user=free_user)[0] == 3
    clock.now += 60.5
    assert allowed_in_a_row(user=free_user)[0] == 6


def test_a_plan_handed_in_is_used_without_looking_it_up(tight_limits, plans, free_user, django_assert_num_queries):
    pro = Plan.objects.get(slug="pro")
    with django_assert_num_queries(0):
        for _ in range(6):
            check_rate_limit(user=free_user, plan=pro)
    with pytest.raises(RateLimited) as refused:
        check_rate_limit(user=free_user, plan=pro)
    assert "limit of 6 requests a minute of the Pro plan" in refused.value.message


def test_rate_limiting_can_be_switched_off(tight_limits, free_user, settings):
    settings.RATELIMIT_ENABLE = False
    for _ in range(10):
        check_rate_limit(user=free_user)
    with event_loop() as runner:
        for _ in range(10):
            runner.run(acheck_rate_limit(user=free_user, plan=Plan.objects.get(slug="free")))


# --- Pages ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("who", "expected_allowed"), [("free_user", 3), ("pro_user", 6)])
def test_html_views_answer_429_with_retry_after_beyond_the_plans_limit(
    tight_limits, client, request, who, expected_allowed, clock
):
    # The billing actions are the HTML views that exist so far behind the shared limiter.
    user = request.getfixturevalue(who)
    client.force_login(user)
    url = reverse("billing:portal")

    statuses = [client.post(url).status_code for _ in range(expected_allowed)]
    clock.now += 15
    refused = client.post(url)
    api_refusal = client.post(url, HTTP_ACCEPT="application/json")

    assert statuses == [302] * expected_allowed
    assert refused.status_code == 429
    assert refused["Retry-After"] == "45"
    page = refused.content.decode()
    assert f"limit of {expected_allowed} requests a minute" in page
    assert "Try again in 45 seconds" in page

    assert api_refusal.status_code == 429
    assert api_refusal.json()["error"]["code"] == "rate_limited"
    assert api_refusal.json()["error"]["retry_after"] == 45
    assert api_refusal["Retry-After"] == "45"
