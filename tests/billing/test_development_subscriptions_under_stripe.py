"""Subscriptions made with development payments (provider "dev", nothing charged) once Stripe takes
payment: they end at their period end, are neither renewed nor changed, and the user is told why in a
sentence and can subscribe through Stripe instead. Under development payments they renew as before
(tests/billing/test_beat_tasks.py::test_rollover_moves_a_dev_subscription_into_its_next_period_with_a_fresh_allowance).
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format

from billing import selectors, tasks
from billing.models import Subscription
from tests.billing.conftest import subscribe
from tests.billing.stripe_payloads import PRICES, event, post_webhook, subscription

DAY = 86400
WHY = "came from development payments, when nothing was charged"


def end_of(sub: Subscription) -> str:
    return date_format(timezone.localtime(sub.current_period_end), "j F")


def unchanged(sub: Subscription, plan_slug: str) -> bool:
    sub.refresh_from_db()
    return (sub.plan.slug, sub.status, sub.cancel_at_period_end, sub.scheduled_plan_id) == (
        plan_slug,
        Subscription.Status.ACTIVE,
        False,
        None,
    )


def test_under_stripe_a_development_subscription_cannot_change_plan_and_the_user_is_told_why(
    client, free_user, plans, stripe_api
):
    sub = subscribe(free_user, plans["plus"], days_left=10)
    client.force_login(free_user)
    sentence = (
        f"Your Plus plan {WHY}; now that payments go through Stripe, it ends on {end_of(sub)} "
        "and cannot be renewed or changed."
    )

    # Moving to Free or keeping the plan past its end is refused with the reason,
    to_free = client.post(reverse("billing:choose_plan", args=["free"]))
    kept = client.post(reverse("billing:keep_plan"))
    for refused in (to_free, kept):
        assert refused.status_code == 400
        assert sentence in refused.content.decode()
    assert unchanged(sub, "plus")

    # the pages say it (with no "Keep my plan" button), and offer Stripe for the plan itself,
    for page in (reverse("billing:overview"), reverse("billing:plans"), reverse("billing:usage")):
        content = client.get(page).content.decode()
        assert sentence in content, page
        assert 'data-testid="keep-plan"' not in content, page
    plans_page = client.get(reverse("billing:plans")).content.decode()
    assert "Subscribe to Plus through Stripe" in plans_page

    # and a paid plan is bought through Stripe's Checkout: the development subscription is left as it was.
    to_pro = client.post(reverse("billing:choose_plan", args=["pro"]))
    assert to_pro.status_code == 302 and to_pro.url.startswith("https://checkout.stripe.com/")
    [checkout] = stripe_api.calls("POST", "/v1/checkout/sessions")
    assert checkout.params["line_items[0][price]"] == PRICES["pro"]
    assert unchanged(sub, "plus")
    to_plus = client.post(reverse("billing:choose_plan", args=["plus"]))
    assert to_plus.status_code == 302 and to_plus.url.startswith("https://checkout.stripe.com/")
    assert stripe_api.calls("POST", "/v1/checkout/sessions")[-1].params["line_items[0][price]"] == PRICES["plus"]
    assert unchanged(sub, "plus")
    assert selectors.effective_plan(free_user).slug == "plus"  # until its period ends


def test_under_stripe_a_development_subscription_is_not_renewed_at_its_period_end(plans, free_user, stripe_api):
    now = timezone.now()
    sub = subscribe(free_user, plans["pro"])
    Subscription.objects.filter(pk=sub.pk).update(
        current_period_start=now - timedelta(days=31), current_period_end=now - timedelta(hours=1)
    )

    # Its period is over: it grants nothing even before the hourly roll-over has run,
    assert selectors.effective_plan(free_user).slug == "free"

    # and the roll-over ends it at its period's end instead of starting another month.
    result = tasks.roll_over_periods.delay().get()

    sub.refresh_from_db()
    assert result == {"examined": 1, "changed": [sub.pk]}
    assert sub.status == Subscription.Status.CANCELED
    assert sub.ended_at == sub.canceled_at == sub.current_period_end
    assert selectors.effective_plan(free_user).slug == "free"
    assert selectors.current_period(free_user).period.start == sub.current_period_end  # Free counts from there
    assert stripe_api.requests == []  # nothing was asked of Stripe about it


def test_a_user_who_already_subscribed_through_stripe_is_not_sent_to_checkout_again(
    client, free_user, plans, stripe_api, django_capture_on_commit_callbacks
):
    # A development Pro plan runs out its period beside a Plus subscription bought through Stripe.
    dev = subscribe(free_user, plans["pro"], days_left=10)
    now = int(time.time())
    stripe_plus = subscription(
        "sub_s",
        customer="cus_s",
        plan="plus",
        status="active",
        start=now - DAY,
        end=now + 29 * DAY,
        user_id=free_user.pk,
    )
    with django_capture_on_commit_callbacks(execute=True):
        post_webhook(client, event("evt_s1", "customer.subscription.created", now - DAY, stripe_plus))
    assert Subscription.objects.filter(provider=Subscription.Provider.STRIPE, status="active").count() == 1
    client.force_login(free_user)

    for slug in ("pro", "plus"):
        refused = client.post(reverse("billing:choose_plan", args=[slug]))
        assert refused.status_code == 400
        page = refused.content.decode()
        assert f"Your Pro plan {WHY}" in page
        assert "Your Plus plan through Stripe carries on after it" in page

    assert stripe_api.calls("POST", "/v1/checkout/sessions") == []
    assert unchanged(dev, "pro")
