"""Putting a test user on a plan, as a paid subscription would."""

import uuid
from datetime import timedelta

from django.utils import timezone

from billing.models import Plan, Subscription
from billing.seed import seed_plans


def put_on_plan(user, slug: str, **plan_changes) -> Plan:
    seed_plans(Plan)  # a transactional test's flush empties the seeded table
    plan = Plan.objects.get(slug=slug)
    if plan_changes:
        Plan.objects.filter(pk=plan.pk).update(**plan_changes)
        plan.refresh_from_db()
    if not plan.is_default:
        now = timezone.now()
        Subscription.objects.create(
            user=user,
            plan=plan,
            status=Subscription.Status.ACTIVE,
            provider=Subscription.Provider.DEV,
            provider_subscription_id=f"test-{uuid.uuid4().hex}",
            current_period_start=now,
            current_period_end=now + timedelta(days=30),
        )
    return plan
