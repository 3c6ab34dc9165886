"""The development provider: no payment, a plan change takes effect on click.

It keeps one subscription row per user (provider "dev"), so everything downstream (effective plan,
periods, quotas, rollover) behaves exactly as with a paying subscription.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from billing.models import Plan, Subscription
from billing.periods import add_months, cycle_containing
from billing.providers.base import NextStep, ReturnUrls


class DevProvider:
    name = "dev"
    label = "Development payments"
    takes_payment = False

    def change_plan(self, user, plan: Plan, *, urls: ReturnUrls) -> NextStep:
        now = timezone.now()
        with transaction.atomic():
            existing = Subscription.objects.select_for_update().filter(
                user=user, provider=Subscription.Provider.DEV
            ).first()
            if plan.is_default:
                if existing is not None and existing.status != Subscription.Status.CANCELED:
                    existing.status = Subscription.Status.CANCELED
                    existing.canceled_at = existing.ended_at = now
                    existing.save(update_fields=["status", "canceled_at", "ended_at", "updated"])
            else:
                Subscription.objects.update_or_create(
                    provider=Subscription.Provider.DEV, provider_subscription_id=f"dev-{user.pk}",
                    defaults={
                        "user": user, "plan": plan, "status": Subscription.Status.ACTIVE,
                        "provider_customer_id": f"dev-customer-{user.pk}",
                        "current_period_start": now, "current_period_end": add_months(now, 1),
                        "cancel_at_period_end": False, "past_due_since": None, "canceled_at": None, "ended_at": None,
                        "last_payment_status": "", "last_payment_at": None,
                    },
                )
        return NextStep(urls.success,
                        f"You are now on the {plan.name} plan (development payments: nothing was charged).")

    def portal_url(self, user, *, return_url: str) -> str | None:
        return None

    def refresh(self, subscription: Subscription, now: datetime) -> None:
        if subscription.cancel_at_period_end:
            subscription.status = Subscription.Status.CANCELED
            subscription.canceled_at = subscription.ended_at = subscription.current_period_end
        else:
            period = cycle_containing(subscription.current_period_start, subscription.current_period_end, now)
            subscription.current_period_start, subscription.current_period_end = period.start, period.end
        subscription.save()

    def end_after_grace(self, subscription: Subscription, now: datetime) -> None:
        subscription.status = Subscription.Status.CANCELED
        subscription.canceled_at = subscription.ended_at = now
        subscription.save(update_fields=["status", "canceled_at", "ended_at", "updated"])
