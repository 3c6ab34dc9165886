"""The Celery beat jobs: period rollover, the end of a past-due grace period, nightly reconciliation of
the Redis counters with the ledger, and the retry sweep for webhook events. Tasks run eagerly (as
Celery is configured in tests), in committed transactions so settlement reaches the counters.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from billing import selectors, tasks
from billing.models import CounterReconciliation, ProviderEvent, Subscription, UsageRecord
from billing.periods import add_months
from billing.quota_store import get_store
from billing.services import reserve_quota, settle
from billing.services.stripe_events import receive_webhook
from config.celery import app
from tests.billing.conftest import subscribe
from tests.billing.stripe_payloads import checkout_session, event, sign, subscription
from tests.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)
DAY = 86400


def use(user, tokens: int) -> UsageRecord:
    return settle(
        reserve_quota(user, tokens, model="sim-small"),
        prompt_tokens=tokens,
        cached_tokens=0,
        completion_tokens=0,
        model="sim-small",
    )


def webhook(payload: dict) -> None:
    """Receive a signed event as the webhook view does (processing runs on commit, eagerly)."""
    body = json.dumps(payload)
    receive_webhook(body.encode(), sign(body))


def test_the_beat_schedule_names_only_registered_billing_tasks():
    billing_entries = {
        name: entry for name, entry in settings.CELERY_BEAT_SCHEDULE.items() if entry["task"].startswith("billing.")
    }

    assert {entry["task"] for entry in billing_entries.values()} == {
        "billing.tasks.roll_over_periods",
        "billing.tasks.end_past_due_after_grace",
        "billing.tasks.reconcile_usage_counters",
        "billing.tasks.retry_provider_events",
    }
    assert all(entry["task"] in app.tasks for entry in billing_entries.values())


def test_rollover_moves_a_dev_subscription_into_its_next_period_with_a_fresh_allowance(plans, free_user):
    # Given a Pro month that ended ten days ago, with 5,000 tokens used in it,
    now = timezone.now()
    start = add_months(now - timedelta(days=10), -1)
    sub = subscribe(free_user, plans["pro"])
    Subscription.objects.filter(pk=sub.pk).update(
        current_period_start=start, current_period_end=now - timedelta(days=10)
    )
    UsageRecord.objects.create(
        user=free_user,
        reservation_id="r-old",
        generation_id="g-old",
        plan_slug="pro",
        model="sim-small",
        prompt_tokens=5_000,
        completion_tokens=0,
        billable_tokens=5_000,
        created=now - timedelta(days=12),
    )

    # when the hourly rollover runs,
    result = tasks.roll_over_periods.delay().get()

    # then the subscription is in the period holding today, and that period starts from zero.
    sub.refresh_from_db()
    assert result == {"examined": 1, "changed": [sub.pk]}
    assert (sub.current_period_start, sub.current_period_end) == (now - timedelta(days=10), add_months(start, 2))
    assert sub.current_period_start <= timezone.now() < sub.current_period_end
    assert get_store().snapshot(free_user.pk, selectors.current_period(free_user).period.key) == (0, 0)
    assert selectors.usage_summary(free_user).billable_tokens == 0


def test_rollover_ends_a_subscription_set_to_cancel_and_the_user_is_back_on_free(plans, free_user):
    now = timezone.now()
    sub = subscribe(free_user, plans["plus"], cancel_at_period_end=True)
    Subscription.objects.filter(pk=sub.pk).update(
        current_period_start=now - timedelta(days=31), current_period_end=now - timedelta(hours=1)
    )

    tasks.roll_over_periods.delay()

    sub.refresh_from_db()
    assert sub.status == Subscription.Status.CANCELED
    assert sub.ended_at == sub.current_period_end
    assert selectors.effective_plan(free_user).slug == "free"


def test_rollover_reads_a_late_stripe_renewal_from_stripes_api(plans, free_user, stripe_api):
    now = int(time.time())
    old_start, old_end, new_end = now - 31 * DAY, now - DAY, now + 29 * DAY
    webhook(
        event(
            "evt_c",
            "checkout.session.completed",
            old_start,
            checkout_session("cs_1", customer="cus_r", sub_id="sub_r", user_id=free_user.pk, plan="plus"),
        )
    )
    webhook(
        event(
            "evt_s",
            "customer.subscription.created",
            old_start,
            subscription("sub_r", customer="cus_r", plan="plus", status="active", start=old_start, end=old_end),
        )
    )
    # Stripe renewed it, but its customer.subscription.updated has not arrived.
    stripe_api.subscriptions["sub_r"] = subscription(
        "sub_r", customer="cus_r", plan="plus", status="active", start=old_end, end=new_end
    )

    tasks.roll_over_periods.delay()

    sub = Subscription.objects.get(provider_subscription_id="sub_r")
    assert int(sub.current_period_start.timestamp()) == old_end
    assert int(sub.current_period_end.timestamp()) == new_end
    assert stripe_api.calls("GET", "/v1/subscriptions/sub_r")
    assert ProviderEvent.objects.filter(source=ProviderEvent.Source.API, subscription_ref="sub_r").count() == 1


def test_past_due_keeps_the_plan_through_the_grace_period_then_drops_to_free(plans, free_user, other_user):
    now = timezone.now()
    grace = timedelta(days=settings.BILLING_PAST_DUE_GRACE_DAYS)
    late = subscribe(
        free_user, plans["pro"], status=Subscription.Status.PAST_DUE, past_due_since=now - grace - timedelta(hours=1)
    )
    recent = subscribe(
        other_user, plans["pro"], status=Subscription.Status.PAST_DUE, past_due_since=now - grace + timedelta(hours=1)
    )
    assert selectors.effective_plan(other_user).slug == "pro"

    result = tasks.end_past_due_after_grace.delay().get()

    late.refresh_from_db()
    recent.refresh_from_db()
    assert result == {"examined": 1, "ended": [late.pk]}
    assert (late.status, recent.status) == (Subscription.Status.CANCELED, Subscription.Status.PAST_DUE)
    assert late.ended_at is not None
    assert selectors.effective_plan(free_user).slug == "free"
    assert selectors.effective_plan(other_user).slug == "pro"


def test_a_stripe_subscription_past_its_grace_is_canceled_here_and_at_stripe(plans, free_user, stripe_api):
    failed_at = int(time.time()) - (settings.BILLING_PAST_DUE_GRACE_DAYS + 1) * DAY
    past_due = subscription(
        "sub_g",
        customer="cus_g",
        plan="pro",
        status="past_due",
        start=failed_at,
        end=failed_at + 30 * DAY,
        user_id=free_user.pk,
    )
    webhook(event("evt_pd", "customer.subscription.updated", failed_at, past_due))
    stripe_api.subscriptions["sub_g"] = past_due

    tasks.end_past_due_after_grace.delay()

    sub = Subscription.objects.get(provider_subscription_id="sub_g")
    assert sub.status == Subscription.Status.CANCELED
    assert selectors.effective_plan(free_user).slug == "free"
    assert stripe_api.calls("DELETE", "/v1/subscriptions/sub_g")
    # An older event arriving late cannot bring the plan back: the decision is part of the history.
    webhook(event("evt_pd_late", "customer.subscription.updated", failed_at + 3600, past_due))
    sub.refresh_from_db()
    assert sub.status == Subscription.Status.CANCELED


def test_nightly_reconciliation_rebuilds_counters_from_the_ledger_and_reports_drift(plans, free_user, other_user):
    third = make_user("third@example.com")
    for user, tokens in ((free_user, 1_200), (other_user, 300), (third, 50)):
        use(user, tokens)
    store = get_store()
    free_key = selectors.current_period(free_user).period.key
    other_key = selectors.current_period(other_user).period.key
    # Given one counter that drifted (say, a lost settlement) and one that Redis lost,
    store.client.hset(store.key(free_user.pk, free_key), "used", 999)
    store.client.delete(store.key(other_user.pk, other_key))

    result = tasks.reconcile_usage_counters.delay().get()

    # then both are the ledger's figures again, and the drift is reported and kept.
    assert store.snapshot(free_user.pk, free_key) == (1_200, 0)
    assert store.snapshot(other_user.pk, other_key) == (300, 0)
    assert (result["checked"], result["rebuilt"], result["drifted"], result["drift_tokens"]) == (3, 1, 1, 201)
    assert result["details"] == [
        {"user_id": free_user.pk, "period_start": result["details"][0]["period_start"], "counter": 999, "ledger": 1_200}
    ]
    report = CounterReconciliation.objects.get()
    assert (report.checked, report.rebuilt, report.drifted) == (3, 1, 1)


def test_the_retry_sweep_processes_events_whose_processing_was_lost(plans, free_user):
    now = timezone.now()
    for event_id, kind, obj in (
        (
            "evt_1",
            "checkout.session.completed",
            checkout_session("cs_1", customer="cus_l", sub_id="sub_l", user_id=free_user.pk, plan="pro"),
        ),
        (
            "evt_2",
            "customer.subscription.created",
            subscription(
                "sub_l",
                customer="cus_l",
                plan="pro",
                status="active",
                start=int(time.time()) - DAY,
                end=int(time.time()) + 29 * DAY,
            ),
        ),
    ):
        # Stored by the webhook, but the worker died before processing them.
        ProviderEvent.objects.create(
            event_id=event_id, type=kind, occurred_at=now - timedelta(days=1), subscription_ref="sub_l", payload=obj
        )
    ProviderEvent.objects.update(received_at=now - timedelta(minutes=10))
    assert selectors.effective_plan(free_user).slug == "free"

    processed = tasks.retry_provider_events.delay().get()

    assert processed == 2
    assert selectors.effective_plan(free_user).slug == "pro"
