"""The plan and period a request runs under are looked up once and then cached, and a plan change,
a staff edit or the end of a period is seen by the very next request."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import cache as billing_cache
from billing.models import Plan
from billing.providers.base import ReturnUrls
from billing.services.subscriptions import change_plan
from tests.billing.conftest import subscribe

URLS = ReturnUrls(
    success="http://testserver/billing/?ok", cancel="http://testserver/billing/", billing="http://testserver/billing/"
)


def test_the_second_request_does_not_look_the_plan_up_again(plans, free_user):
    first = billing_cache.current_period(free_user)
    with CaptureQueriesContext(connection) as queries:
        again = billing_cache.current_period(free_user)
    assert len(queries) == 0
    assert again.plan == first.plan == plans["free"] and again.period == first.period


def test_an_upgrade_is_seen_by_the_next_request(plans, free_user, settings):
    settings.PAYMENT_PROVIDER = "dev"
    assert billing_cache.current_period(free_user).plan == plans["free"]
    change_plan(free_user, "plus", urls=URLS)
    assert billing_cache.current_period(free_user).plan == plans["plus"]


def test_a_staff_edit_of_a_plan_is_seen_by_the_next_request(plans, pro_user):
    assert billing_cache.current_period(pro_user).plan.requests_per_minute == plans["pro"].requests_per_minute
    pro = Plan.objects.get(slug="pro")
    pro.requests_per_minute = 7
    pro.save()  # as the admin does
    assert billing_cache.current_period(pro_user).plan.requests_per_minute == 7


def test_a_cancelled_subscription_is_seen_by_the_next_request(plans, free_user):
    subscription = subscribe(free_user, plans["plus"])
    assert billing_cache.current_period(free_user).plan == plans["plus"]
    subscription.delete()
    assert billing_cache.current_period(free_user).plan == plans["free"]


def test_an_entry_is_not_used_after_its_period_has_ended(plans, free_user, monkeypatch):
    subscribe(free_user, plans["plus"], days_left=1)
    cached = billing_cache.current_period(free_user)
    later = cached.period.end + timedelta(minutes=1)
    monkeypatch.setattr(billing_cache.timezone, "now", lambda: later)
    with CaptureQueriesContext(connection) as queries:
        fresh = billing_cache.current_period(free_user)
    assert len(queries) > 0
    assert fresh.period.start >= cached.period.end
