"""Changing plans, and the periodic upkeep of subscriptions (rollover, end of grace)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from billing import selectors
from billing.models import Plan, Subscription
from billing.providers import NextStep, ReturnUrls, get_provider
from billing.services.quota import ensure_counter
from config.refusals import BadInput, NotFound

logger = logging.getLogger(__name__)


def change_plan(user, plan_slug: str, *, urls: ReturnUrls) -> NextStep:
    """Start moving the user to another public plan through the configured provider."""
    plan = Plan.objects.filter(slug=plan_slug, is_public=True).first()
    if plan is None:
        raise NotFound(f"There is no plan called {plan_slug!r}.")
    current = selectors.effective_plan(user)
    if plan.pk == current.pk:
        raise BadInput(f"You are already on the {plan.name} plan.")
    return get_provider().change_plan(user, plan, urls=urls)


@dataclass(frozen=True)
class UpkeepReport:
    examined: int
    changed: list[int]


def roll_over_periods(now: datetime | None = None) -> UpkeepReport:
    """Bring subscriptions whose period has ended into their next period (or to their end).

    Dev subscriptions advance a month (or end, when set to cancel); Stripe ones are read back from
    Stripe, whose renewal events may be late. The new period's quota counter starts from the ledger.
    """
    now = now or timezone.now()
    # Not just the granting ones: a subscription set to cancel stops granting when its period ends,
    # and this is where it is marked as ended.
    live = [Subscription.Status.ACTIVE, Subscription.Status.TRIALING, Subscription.Status.PAST_DUE]
    due = list(Subscription.objects.filter(status__in=live, current_period_end__lte=now).select_related("user"))
    changed = []
    for subscription in due:
        before = (subscription.status, subscription.current_period_end)
        get_provider(subscription.provider).refresh(subscription, now)
        subscription.refresh_from_db()
        if (subscription.status, subscription.current_period_end) != before:
            changed.append(subscription.pk)
        ensure_counter(subscription.user_id, selectors.current_period(subscription.user, now).period, now)
    return UpkeepReport(examined=len(due), changed=changed)


def end_past_due_after_grace(now: datetime | None = None) -> UpkeepReport:
    """Cancel subscriptions that stayed past due for longer than BILLING_PAST_DUE_GRACE_DAYS: back to Free."""
    now = now or timezone.now()
    limit = now - timedelta(days=settings.BILLING_PAST_DUE_GRACE_DAYS)
    expired = list(Subscription.objects.filter(status=Subscription.Status.PAST_DUE, past_due_since__lte=limit))
    for subscription in expired:
        get_provider(subscription.provider).end_after_grace(subscription, now)
        logger.info("subscription %s of user %s ended after its grace period", subscription.pk, subscription.user_id)
    ended = Subscription.objects.filter(pk__in=[s.pk for s in expired], status=Subscription.Status.CANCELED)
    return UpkeepReport(examined=len(expired), changed=list(ended.values_list("pk", flat=True)))
