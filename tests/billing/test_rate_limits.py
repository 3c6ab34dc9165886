"""Rate limits: the plan sets the rate, one service decides, and pages answer 429 with Retry-After."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import reverse
from django_ratelimit.core import _get_window

from billing.models import Plan
from billing.services import check_rate_limit, rate_limits
from config.refusals import RateLimited
from tests.billing.conftest import subscribe


@pytest.fixture
def tight_limits(plans):
    """Free: 3 requests a minute, Plus: 4, Pro: 6 (small numbers keep the tests short)."""
    for slug, rate in (("free", 3), ("plus", 4), ("pro", 6)):
        Plan.objects.filter(slug=slug).update(requests_per_minute=rate)


def window(user=None, api_key_id=None, ip=None) -> int:
    """The end of the fixed one-minute window the request falls in (django-ratelimit's own arithmetic)."""
    return _get_window(rate_limits._subject(user, api_key_id, ip).key, 60)


def in_one_window(measure, **who):
    """Windows are fixed minutes: a measurement that straddles a boundary is taken again in the next one."""
    for _ in range(3):
        start = window(**who)
        result = measure()
        if window(**who) == start:
            return result
        cache.clear()
    raise AssertionError("could not measure within one rate-limit window")


def allowed_in_a_row(scope: str = "chat", **who) -> tuple[int, RateLimited]:
    """How many requests pass before the first refusal (and the refusal itself)."""

    def measure():
        for n in range(100):
            try:
                check_rate_limit(scope=scope, **who)
            except RateLimited as refusal:
                return n, refusal
        raise AssertionError("never limited")

    return in_one_window(measure, **who)


def test_the_limit_is_the_plans_and_the_refusal_names_it_and_the_plan_that_lifts_it(tight_limits, free_user,
                                                                                      pro_user):
    free_count, free_refusal = allowed_in_a_row(user=free_user)
    pro_count, pro_refusal = allowed_in_a_row(user=pro_user)

    assert (free_count, pro_count) == (3, 6)
    assert free_refusal.status == 429
    assert 1 <= free_refusal.retry_after <= 60
    assert "limit of 3 requests a minute of the Free plan" in free_refusal.message
    assert f"Try again in {free_refusal.retry_after} second" in free_refusal.message
    assert "upgrade to Plus for 4 a minute" in free_refusal.message
    assert "limit of 6 requests a minute of the Pro plan" in pro_refusal.message
    assert "upgrade" not in pro_refusal.message  # nothing above Pro


def test_users_api_keys_and_anonymous_addresses_each_have_their_own_window(tight_limits, free_user, other_user):
    assert allowed_in_a_row(user=free_user)[0] == 3
    # Another user, the first user's API key, and an anonymous address are all counted apart.
    assert allowed_in_a_row(user=other_user)[0] == 3
    assert allowed_in_a_row(user=free_user, api_key_id=11)[0] == 3
    _, refusal = allowed_in_a_row(user=free_user, api_key_id=12)
    assert refusal.message.startswith("This API key reached the limit")
    assert allowed_in_a_row(user=None, ip="203.0.113.9")[0] == 3


def test_an_ipv6_client_is_limited_per_network_not_per_address(tight_limits):
    def measure():
        for n in range(3):
            check_rate_limit(user=None, ip=f"2001:db8:1:2::{n + 1}")
        with pytest.raises(RateLimited) as refused:
            check_rate_limit(user=None, ip="2001:db8:1:2::ffff")
        return refused.value

    refusal = in_one_window(measure, ip="2001:db8:1:2::1")
    assert "sign in and choose Plus" in refusal.message


def test_each_scope_has_its_own_window_shared_by_every_transport(tight_limits, free_user):
    assert allowed_in_a_row(user=free_user, scope="chat")[0] == 3
    assert allowed_in_a_row(user=free_user, scope="billing")[0] == 3


def test_upgrading_raises_the_limit_at_once(tight_limits, free_user, plans):
    assert allowed_in_a_row(user=free_user)[0] == 3

    subscribe(free_user, plans["pro"])

    assert allowed_in_a_row(user=free_user)[0] == 6  # a fresh window at the Pro rate


def test_rate_limiting_can_be_switched_off(tight_limits, free_user, settings):
    settings.RATELIMIT_ENABLE = False
    for _ in range(10):
        check_rate_limit(user=free_user)


@pytest.mark.parametrize(("who", "expected_allowed"), [("free_user", 3), ("pro_user", 6)])
def test_html_views_answer_429_with_retry_after_beyond_the_plans_limit(tight_limits, client, request, who,
                                                                        expected_allowed):
    # The billing actions are the HTML views that exist so far behind the shared limiter.
    user = request.getfixturevalue(who)
    client.force_login(user)
    url = reverse("billing:portal")

    statuses, refused, api_refusal = in_one_window(
        lambda: ([client.post(url).status_code for _ in range(expected_allowed)], client.post(url),
                 client.post(url, HTTP_ACCEPT="application/json")),
        user=user,
    )

    assert statuses == [302] * expected_allowed
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    page = refused.content.decode()
    assert f"limit of {expected_allowed} requests a minute" in page

    assert api_refusal.status_code == 429
    assert api_refusal.json()["error"]["code"] == "rate_limited"
    assert int(api_refusal["Retry-After"]) >= 1
