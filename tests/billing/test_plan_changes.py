"""Plan changes in the middle of a period: the usage already counted stays counted (the ledger is the
truth, and the Usage page and the quota agree with it); an upgrade applies at once to what was used;
a downgrade or a cancellation waits for the end of the paid period, says so, and can be undone until
then; the period roll-over (dev) and Stripe's webhooks (Stripe) carry it out. The messages after a
change say only what is true for the provider in use and the direction of the change.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format

from billing import selectors, tasks
from billing.models import Subscription, UsageRecord
from billing.services import reserve_quota
from config.refusals import QuotaExceeded
from tests.billing.conftest import subscribe
from tests.billing.stripe_payloads import event, post_webhook, subscription

DAY = 86400


@pytest.fixture
def deliver(client, django_capture_on_commit_callbacks):
    def post(payload):
        with django_capture_on_commit_callbacks(execute=True):
            return post_webhook(client, payload)

    return post


def spend(user, tokens: int, *, plan_slug: str, ago: timedelta = timedelta(minutes=5)) -> UsageRecord:
    return UsageRecord.objects.create(
        user=user,
        reservation_id=uuid.uuid4().hex,
        generation_id=uuid.uuid4().hex,
        plan_slug=plan_slug,
        model="sim-small",
        prompt_tokens=tokens,
        completion_tokens=0,
        billable_tokens=tokens,
        created=timezone.now() - ago,
    )


def ledger(user) -> tuple[int, int]:
    """(rows, billable tokens) the ledger holds for the user, all periods."""
    rows = UsageRecord.objects.filter(user=user)
    return rows.count(), rows.aggregate(total=Sum("billable_tokens"))["total"] or 0


def quota_line(page: str) -> str:
    """The Usage page's figures as a person reads them: "11,594 of 5,000,000 tokens used"."""
    block = re.search(r'data-testid="quota">(.*?)</p>', page, re.S).group(1)
    return " ".join(re.sub(r"<[^>]+>", "", block).split())


def messages_on(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def choose(client, slug: str):
    return client.post(reverse("billing:choose_plan", args=[slug]), follow=True)


def end_of(subscription: Subscription) -> str:
    return date_format(timezone.localtime(subscription.current_period_end), "j F")


def test_an_upgrade_mid_period_keeps_the_usage_and_gives_the_new_allowance_at_once(client, free_user):
    spend(free_user, 11_594, plan_slug="free")
    client.force_login(free_user)

    choose(client, "plus")

    page = client.get(reverse("billing:usage")).content.decode()
    assert selectors.effective_plan(free_user).slug == "plus"
    assert quota_line(page).startswith("11,594 of 5,000,000 tokens used")
    assert ledger(free_user) == (1, 11_594)
    # The quota counts the same 11,594: the most one request may still hold is the rest of Plus's allowance.
    with pytest.raises(QuotaExceeded):
        reserve_quota(free_user, 5_000_000 - 11_594 + 1, model="sim-small")
    reserve_quota(free_user, 5_000_000 - 11_594, model="sim-small")


def test_an_upgrade_between_paid_plans_keeps_the_period_and_its_usage(client, free_user, plans):
    sub = subscribe(free_user, plans["plus"], days_left=12)
    spend(free_user, 100_000, plan_slug="plus")
    client.force_login(free_user)

    choose(client, "pro")

    renewed = Subscription.objects.get(pk=sub.pk)
    page = client.get(reverse("billing:usage")).content.decode()
    assert renewed.plan.slug == "pro"
    assert (renewed.current_period_start, renewed.current_period_end) == (
        sub.current_period_start,
        sub.current_period_end,
    )
    assert quota_line(page).startswith("100,000 of 25,000,000 tokens used")


def test_a_downgrade_to_free_waits_for_the_end_of_the_paid_period_and_then_happens(client, free_user, plans):
    sub = subscribe(free_user, plans["plus"], days_left=10)
    spend(free_user, 40_000, plan_slug="plus", ago=timedelta(days=2))
    client.force_login(free_user)
    ends = end_of(sub)

    response = choose(client, "free")

    # Still Plus, with the period's usage, and every page says what happens when.
    sub.refresh_from_db()
    assert sub.status == Subscription.Status.ACTIVE and sub.cancel_at_period_end
    assert selectors.effective_plan(free_user).slug == "plus"
    notice = f"Your Plus plan ends on {ends}; then you move to Free."
    assert messages_on(response) == [f"Your Plus plan continues until {ends}; then you move to Free."]
    usage = client.get(reverse("billing:usage")).content.decode()
    assert quota_line(usage).startswith("40,000 of 5,000,000 tokens used")
    for name in ("billing:usage", "billing:overview", "billing:plans"):
        assert notice in client.get(reverse(name)).content.decode(), name
    assert ledger(free_user) == (1, 40_000)

    # The period ends; the hourly roll-over carries the change out.
    Subscription.objects.filter(pk=sub.pk).update(
        current_period_start=timezone.now() - timedelta(days=30),
        current_period_end=timezone.now() - timedelta(minutes=1),
    )
    tasks.roll_over_periods.delay().get()

    sub.refresh_from_db()
    assert sub.status == Subscription.Status.CANCELED and sub.ended_at == sub.current_period_end
    assert selectors.effective_plan(free_user).slug == "free"
    usage = client.get(reverse("billing:usage")).content.decode()
    assert quota_line(usage).startswith("0 of 200,000 tokens used")
    assert "then you move to" not in usage
    assert ledger(free_user) == (1, 40_000)  # the Plus period's usage is still in the ledger
    assert UsageRecord.objects.get(user=free_user).plan_slug == "plus"


def test_keep_my_plan_undoes_a_scheduled_downgrade(client, free_user, plans):
    sub = subscribe(free_user, plans["plus"], days_left=10)
    client.force_login(free_user)
    choose(client, "free")

    response = client.post(reverse("billing:keep_plan"), follow=True)

    sub.refresh_from_db()
    assert not sub.cancel_at_period_end and sub.scheduled_plan is None
    assert messages_on(response) == [f"You stay on the Plus plan; it renews on {end_of(sub)}."]
    assert "then you move to" not in client.get(reverse("billing:overview")).content.decode()
    # And the roll-over now renews it instead of ending it.
    Subscription.objects.filter(pk=sub.pk).update(
        current_period_start=timezone.now() - timedelta(days=30),
        current_period_end=timezone.now() - timedelta(minutes=1),
    )
    tasks.roll_over_periods.delay().get()
    assert selectors.effective_plan(free_user).slug == "plus"


def test_a_downgrade_between_paid_plans_is_scheduled_and_applied_at_the_roll_over(client, free_user, plans):
    sub = subscribe(free_user, plans["pro"], days_left=5)
    spend(free_user, 300_000, plan_slug="pro")
    client.force_login(free_user)

    response = choose(client, "plus")

    assert selectors.effective_plan(free_user).slug == "pro"
    assert messages_on(response) == [f"Your Pro plan continues until {end_of(sub)}; then you move to Plus."]
    assert f"Your Pro plan ends on {end_of(sub)}; then you move to Plus." in (
        client.get(reverse("billing:usage")).content.decode()
    )
    assert quota_line(client.get(reverse("billing:usage")).content.decode()).startswith(
        "300,000 of 25,000,000 tokens used"
    )

    Subscription.objects.filter(pk=sub.pk).update(
        current_period_start=timezone.now() - timedelta(days=30),
        current_period_end=timezone.now() - timedelta(minutes=1),
    )
    tasks.roll_over_periods.delay().get()

    sub.refresh_from_db()
    assert (sub.plan.slug, sub.status, sub.scheduled_plan) == ("plus", Subscription.Status.ACTIVE, None)
    assert sub.current_period_start <= timezone.now() < sub.current_period_end
    assert quota_line(client.get(reverse("billing:usage")).content.decode()).startswith("0 of 5,000,000 tokens used")
    assert ledger(free_user) == (1, 300_000)


def test_choosing_the_plan_already_scheduled_is_refused_with_a_reason(client, free_user, plans):
    subscribe(free_user, plans["plus"], days_left=10)
    client.force_login(free_user)
    choose(client, "free")

    again = client.post(reverse("billing:choose_plan", args=["free"]))

    assert again.status_code == 400
    assert "already moves to Free" in again.content.decode()


# --- Defect 5: the messages after a change with the development provider -------------------------------


def test_dev_provider_upgrade_message_is_only_the_dev_one(client, free_user):
    client.force_login(free_user)

    response = choose(client, "plus")

    assert messages_on(response) == ["You are now on the Plus plan (development payments: nothing was charged)."]
    assert "Thank you" not in response.content.decode()


def test_dev_provider_downgrade_message_neither_thanks_for_a_payment_nor_claims_the_switch_is_done(
    client, free_user, plans
):
    sub = subscribe(free_user, plans["plus"], days_left=10)
    client.force_login(free_user)

    response = choose(client, "free")

    page = response.content.decode()
    assert messages_on(response) == [f"Your Plus plan continues until {end_of(sub)}; then you move to Free."]
    assert "Thank you" not in page and "payment went through" not in page
    assert "You are now on" not in page


def test_the_checkout_return_page_thanks_only_for_a_payment_that_was_taken(client, free_user):
    client.force_login(free_user)

    response = client.get(reverse("billing:checkout_done"), follow=True)

    assert messages_on(response) == []


# --- Stripe: cancel_at_period_end, undo, and the webhook that ends it ------------------------------------


def stripe_plus(user, standin, *, start: int, end: int, **extra) -> dict:
    obj = subscription(
        "sub_c", customer="cus_c", plan="plus", status="active", start=start, end=end, user_id=user.pk, **extra
    )
    standin.subscriptions["sub_c"] = obj
    return obj


def test_a_stripe_cancellation_is_set_for_the_period_end_and_can_be_undone(client, free_user, stripe_api, deliver):
    now = int(time.time())
    deliver(
        event(
            "evt_c1",
            "customer.subscription.created",
            now - 10 * DAY,
            stripe_plus(free_user, stripe_api, start=now - 10 * DAY, end=now + 20 * DAY),
        )
    )
    spend(free_user, 7_000, plan_slug="plus")
    client.force_login(free_user)
    sub = Subscription.objects.get(provider_subscription_id="sub_c")

    response = choose(client, "free")

    [update] = stripe_api.calls("POST", "/v1/subscriptions/sub_c")
    assert update.params["cancel_at_period_end"] == "true"
    assert not stripe_api.calls("POST", "/v1/billing_portal/sessions")
    sub.refresh_from_db()
    assert sub.cancel_at_period_end and sub.status == Subscription.Status.ACTIVE
    assert selectors.effective_plan(free_user).slug == "plus"
    assert messages_on(response) == [
        f"Your Plus plan continues until {end_of(sub)}; then you move to Free. You will not be charged again."
    ]
    usage = client.get(reverse("billing:usage")).content.decode()
    assert f"Your Plus plan ends on {end_of(sub)}; then you move to Free." in usage
    assert quota_line(usage).startswith("7,000 of 5,000,000 tokens used")

    kept = client.post(reverse("billing:keep_plan"), follow=True)

    last = stripe_api.calls("POST", "/v1/subscriptions/sub_c")[-1]
    assert last.params["cancel_at_period_end"] == "false"
    sub.refresh_from_db()
    assert not sub.cancel_at_period_end
    assert messages_on(kept) == [f"You stay on the Plus plan; it renews on {end_of(sub)}."]


def test_stripes_webhooks_end_a_cancelled_subscription_at_its_period_end(client, free_user, stripe_api, deliver):
    now = int(time.time())
    start, end = now - 30 * DAY, now - 3600
    deliver(
        event(
            "evt_e1", "customer.subscription.created", start, stripe_plus(free_user, stripe_api, start=start, end=end)
        )
    )
    spend(free_user, 9_000, plan_slug="plus", ago=timedelta(days=3))
    # The user set it to cancel; Stripe confirms with customer.subscription.updated,
    deliver(
        event(
            "evt_e2",
            "customer.subscription.updated",
            start + 20 * DAY,
            stripe_plus(free_user, stripe_api, start=start, end=end, cancel_at_period_end=True),
        )
    )
    # and at the period's end deletes it.
    deliver(
        event(
            "evt_e3",
            "customer.subscription.deleted",
            end,
            stripe_plus(free_user, stripe_api, start=start, end=end, cancel_at_period_end=True)
            | {"status": "canceled", "canceled_at": start + 20 * DAY, "ended_at": end},
        )
    )
    client.force_login(free_user)

    sub = Subscription.objects.get(provider_subscription_id="sub_c")
    assert sub.status == Subscription.Status.CANCELED and int(sub.ended_at.timestamp()) == end
    assert selectors.effective_plan(free_user).slug == "free"
    usage = client.get(reverse("billing:usage")).content.decode()
    assert quota_line(usage).startswith("0 of 200,000 tokens used")
    assert ledger(free_user) == (1, 9_000)
