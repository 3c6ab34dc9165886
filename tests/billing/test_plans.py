"""Plans: the seeded tiers, the one effective plan of every user, what each plan allows, and the
arithmetic of periods and billable tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.test import override_settings
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from billing.models import Plan, Subscription
from billing.periods import add_months, calendar_month, cycle_containing
from billing.pricing import billable_tokens
from billing.seed import SEED_PLANS
from billing.selectors import allowed_models, current_period, effective_plan
from billing.services import check_api_keys_allowed, check_model_allowed
from config.refusals import NotAllowed
from tests.billing.conftest import subscribe

SEEDED_SLUGS = ("free", "plus", "pro")


def test_free_plus_and_pro_are_seeded_with_free_as_the_default(plans):
    free, plus, pro = plans["free"], plans["plus"], plans["pro"]

    assert Plan.objects.get(is_default=True) == free
    assert free.monthly_price_cents == 0 < plus.monthly_price_cents < pro.monthly_price_cents
    assert free.tokens_per_month < plus.tokens_per_month < pro.tokens_per_month
    assert free.requests_per_minute < plus.requests_per_minute < pro.requests_per_minute
    assert (free.priority_class, plus.priority_class, pro.priority_class) == ("free", "premium", "premium")
    assert (free.allows_api_keys, pro.allows_api_keys) == (False, True)


def test_the_migration_gives_the_seed_plans_their_new_chats_a_day_and_api_keys(db):
    # The rows the data migrations wrote (a non-transactional test sees them as migrated).
    figures = {p.slug: (p.new_chats_per_day, p.max_api_keys) for p in Plan.objects.filter(slug__in=SEEDED_SLUGS)}
    assert figures == {"free": (100, 2), "plus": (500, 10), "pro": (2000, 50)}
    assert {p["slug"]: (p["new_chats_per_day"], p["max_api_keys"]) for p in SEED_PLANS} == figures


def test_everyone_without_a_subscription_is_on_free(plans, free_user):
    assert effective_plan(free_user) == plans["free"]
    assert current_period(free_user).subscription is None


@pytest.mark.parametrize(
    ("status", "past_due_days", "expected"),
    [
        (Subscription.Status.ACTIVE, None, "pro"),
        (Subscription.Status.TRIALING, None, "pro"),
        (Subscription.Status.PAST_DUE, 1, "pro"),  # within the grace period
        (Subscription.Status.PAST_DUE, 30, "free"),  # past it
        (Subscription.Status.INCOMPLETE, None, "free"),  # first payment not confirmed
        (Subscription.Status.CANCELED, None, "free"),
    ],
)
def test_the_subscription_status_decides_the_effective_plan(plans, free_user, status, past_due_days, expected):
    since = timezone.now() - timedelta(days=past_due_days) if past_due_days else None
    subscribe(free_user, plans["pro"], status=status, past_due_since=since)

    assert effective_plan(free_user).slug == expected


def test_a_subscription_set_to_cancel_stops_granting_when_its_period_ends(plans, free_user):
    sub = subscribe(free_user, plans["plus"], cancel_at_period_end=True)
    assert effective_plan(free_user).slug == "plus"

    later = sub.current_period_end + timedelta(seconds=1)

    assert effective_plan(free_user, later).slug == "free"


def test_with_two_live_subscriptions_the_richer_plan_applies(plans, free_user):
    subscribe(free_user, plans["plus"])
    subscribe(free_user, plans["pro"])

    assert effective_plan(free_user).slug == "pro"


def test_an_anonymous_visitor_is_on_free(plans):
    assert effective_plan(AnonymousUser()).slug == "free"


def test_free_has_the_small_model_and_paid_plans_every_model(plans, free_user, pro_user):
    assert allowed_models(free_user) == ["sim-small"]
    assert allowed_models(pro_user) == [item.split("=")[0] for item in settings.INFERENCE_MODELS]

    check_model_allowed(effective_plan(free_user), "sim-small")
    check_model_allowed(effective_plan(pro_user), "sim-large")
    with pytest.raises(NotAllowed) as refused:
        check_model_allowed(effective_plan(free_user), "sim-large")
    assert refused.value.status == 403
    assert refused.value.message == ("The model sim-large is not included in the Free plan. Upgrade to Plus to use it.")


def test_a_model_no_plan_offers_is_refused_as_such(plans, pro_user):
    with pytest.raises(NotAllowed, match="not available on any plan"):
        check_model_allowed(effective_plan(pro_user), "gpt-unknown")


def test_api_keys_come_with_the_plans_that_include_them(plans, free_user, pro_user):
    check_api_keys_allowed(effective_plan(pro_user))
    with pytest.raises(NotAllowed, match=r"API keys are not included in the Free plan\. Upgrade to Plus"):
        check_api_keys_allowed(effective_plan(free_user))


def test_staff_edits_to_a_plan_apply_at_once(plans, free_user):
    Plan.objects.filter(slug="free").update(all_models=True, max_output_tokens=2048)

    assert "sim-large" in allowed_models(free_user)
    assert effective_plan(free_user).max_output_tokens == 2048


def test_an_emptied_plan_table_is_seeded_again_so_every_user_still_has_a_plan(db, free_user):
    Plan.objects.all().delete()

    assert effective_plan(free_user).slug == "free"


# --- Arithmetic -------------------------------------------------------------------------------------------


def test_add_months_keeps_the_day_or_takes_the_months_last():
    jan31 = datetime(2024, 1, 31, 12, tzinfo=UTC)

    assert add_months(jan31, 1) == datetime(2024, 2, 29, 12, tzinfo=UTC)
    assert add_months(jan31, 2) == datetime(2024, 3, 31, 12, tzinfo=UTC)
    assert add_months(jan31, -2) == datetime(2023, 11, 30, 12, tzinfo=UTC)
    assert add_months(jan31, 13) == datetime(2025, 2, 28, 12, tzinfo=UTC)


moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC))


@given(start=moments, later=st.integers(min_value=0, max_value=3650 * 24))
def test_a_billing_cycle_always_holds_the_moment_and_stays_on_the_anchor(start, later):
    end = add_months(start, 1)
    moment = start + timedelta(hours=later)

    period = cycle_containing(start, end, moment)

    assert period.contains(moment)
    months = (period.start.year - start.year) * 12 + period.start.month - start.month
    assert (period.start, period.end) == (add_months(start, months), add_months(start, months + 1))
    assert calendar_month(moment).contains(moment)


@given(
    prompt=st.integers(0, 10**7),
    cached_share=st.floats(0, 1),
    completion=st.integers(0, 10**6),
    discount=st.integers(0, 100),
)
def test_billable_tokens_discount_only_the_cached_part(prompt, cached_share, completion, discount):
    cached = int(prompt * cached_share)
    with override_settings(BILLING_CACHED_TOKEN_DISCOUNT_PERCENT=discount):
        billed = billable_tokens(prompt, cached, completion)

    assert prompt - cached + completion <= billed <= prompt + completion
    if discount == 0:
        assert billed == prompt + completion
    if discount == 100:
        assert billed == prompt - cached + completion


def test_cached_tokens_cannot_outnumber_the_prompt():
    with pytest.raises(ValueError, match="outnumber"):
        billable_tokens(10, 11, 0)
