"""The billing period a request runs under, cached: the one plan lookup on the path of one message.

Every message needs the user's plan and period (limits, models, priority, the quota's period), and
working them out costs one to three queries. They change rarely: when a subscription is written
(a plan change, a webhook, a renewal, a cancellation), when staff edit a plan, and when a period
ends. So the answer is kept in the cache (Redis in production: shared by every process) and
dropped on each of those:

- a Subscription saved or deleted drops its user's entry (at once and again after the commit, so
  a reader between the two cannot keep the old one);
- a Plan saved or deleted changes the plans' version, which every entry is checked against;
- an entry is used only inside its own period, and lives at most `TTL_SECONDS` (for the changes
  that come with time alone, such as a lapsed subscription's grace running out).

Writes that bypass the model's save() (QuerySet.update) must drop the entries themselves; the
product has none.
"""

from __future__ import annotations

import uuid

from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from billing import selectors
from billing.models import Plan, Subscription

TTL_SECONDS = 60
PLANS_VERSION_KEY = "billing:plans-version"


def _key(user_id: int) -> str:
    return f"billing:period:{user_id}"


def current_period(user) -> selectors.BillingPeriod:
    """`billing.selectors.current_period(user)` now, from the cache when it holds a valid answer."""
    if user is None or not user.is_authenticated:
        return selectors.current_period(user)
    now = timezone.now()
    key = _key(user.pk)
    found = cache.get_many([key, PLANS_VERSION_KEY])
    version = found.get(PLANS_VERSION_KEY)
    entry = found.get(key)
    if entry is not None and version is not None:
        entry_version, billing = entry
        if entry_version == version and billing.period.start <= now < billing.period.end:
            return billing
    billing = selectors.current_period(user, now)
    if version is None:
        version = uuid.uuid4().hex
        if not cache.add(PLANS_VERSION_KEY, version, timeout=None):
            version = cache.get(PLANS_VERSION_KEY, version)
    ttl = min(TTL_SECONDS, int((billing.period.end - now).total_seconds()))
    if ttl > 0:
        cache.set(key, (version, billing), timeout=ttl)
    return billing


def forget_user(user_id: int) -> None:
    cache.delete(_key(user_id))
    transaction.on_commit(lambda: cache.delete(_key(user_id)))


def forget_plans() -> None:
    cache.set(PLANS_VERSION_KEY, uuid.uuid4().hex, timeout=None)
    transaction.on_commit(lambda: cache.set(PLANS_VERSION_KEY, uuid.uuid4().hex, timeout=None))


@receiver([post_save, post_delete], sender=Subscription, dispatch_uid="billing.cache.subscription")
def _subscription_changed(sender, instance: Subscription, **kwargs) -> None:
    forget_user(instance.user_id)


@receiver([post_save, post_delete], sender=Plan, dispatch_uid="billing.cache.plan")
def _plan_changed(sender, instance: Plan, **kwargs) -> None:
    forget_plans()
