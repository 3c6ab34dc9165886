"""The development provider: no payment; an upgrade takes effect on click, a downgrade at the period's end.

It keeps one subscription row per user (provider "dev"), so everything downstream (effective plan,
periods, quotas, rollover) behaves exactly as with a paying subscription.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy

from billing import selectors
from billing.models import Plan, Subscription
from billing.periods import add_months, cycle_containing
from billing.providers.base import NextStep, ReturnUrls, end_subscription


class DevProvider:
    name = "dev"
    label = gettext_lazy("Development payments")
    takes_payment = False
    keeps_history = False

    def subscribe(self, user, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        now = timezone.now()
        with transaction.atomic():
            # Asked before the row grants anything: the period the user is in now keeps counting.
            carried = selectors.usage_carried_from(user, now)
            Subscription.objects.update_or_create(
                provider=Subscription.Provider.DEV,
                provider_subscription_id=f"dev-{user.pk}",
                defaults={
                    "user": user,
                    "plan": plan,
                    "status": Subscription.Status.ACTIVE,
                    "provider_customer_id": f"dev-customer-{user.pk}",
                    "current_period_start": now,
                    "current_period_end": add_months(now, 1),
                    "usage_period_start": carried,
                    "cancel_at_period_end": False,
                    "scheduled_plan": None,
                    "past_due_since": None,
                    "canceled_at": None,
                    "ended_at": None,
                    "last_payment_status": "",
                    "last_payment_at": None,
                },
            )
        return None

    def upgrade(self, subscription: Subscription, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        # In place: the period and its usage stay; any scheduled downgrade is dropped.
        subscription.plan = plan
        subscription.cancel_at_period_end = False
        subscription.scheduled_plan = None
        subscription.save(update_fields=["plan", "cancel_at_period_end", "scheduled_plan", "updated"])
        return None

    def schedule_downgrade(self, subscription: Subscription, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        subscription.cancel_at_period_end = False
        subscription.scheduled_plan = plan
        subscription.save(update_fields=["cancel_at_period_end", "scheduled_plan", "updated"])
        return None

    def schedule_cancel(self, subscription: Subscription) -> None:
        subscription.cancel_at_period_end = True
        subscription.scheduled_plan = None
        subscription.save(update_fields=["cancel_at_period_end", "scheduled_plan", "updated"])

    def keep(self, subscription: Subscription) -> None:
        subscription.cancel_at_period_end = False
        subscription.scheduled_plan = None
        subscription.save(update_fields=["cancel_at_period_end", "scheduled_plan", "updated"])

    def cancel_now(self, subscription: Subscription, now: datetime) -> None:
        end_subscription(subscription, now)

    def portal_url(self, user, *, return_url: str) -> str | None:
        return None

    def refresh(self, subscription: Subscription, now: datetime) -> None:
        # Once another provider takes payment, nothing was paid for a next period: it ends with this one.
        if subscription.cancel_at_period_end or subscription.is_unpaid_leftover:
            subscription.status = Subscription.Status.CANCELED
            subscription.canceled_at = subscription.ended_at = subscription.current_period_end
        else:
            period = cycle_containing(subscription.current_period_start, subscription.current_period_end, now)
            subscription.current_period_start, subscription.current_period_end = period.start, period.end
            subscription.usage_period_start = None
            if subscription.scheduled_plan_id is not None:
                subscription.plan_id, subscription.scheduled_plan = subscription.scheduled_plan_id, None
        subscription.save()

    def end_after_grace(self, subscription: Subscription, now: datetime) -> None:
        self.cancel_now(subscription, now)
