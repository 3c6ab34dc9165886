"""Billing test fixtures: seeded plans, users on plans, and Stripe's API stood in on a loopback port."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import Plan, Subscription
from billing.seed import seed_plans
from tests.billing.stripe_standin import stripe_stood_in
from tests.conftest import make_user


@pytest.fixture
def plans(db) -> dict[str, Plan]:
    # The data migration seeds them, but a transactional test's flush empties the table again.
    seed_plans(Plan)
    return {plan.slug: plan for plan in Plan.objects.all()}


def subscribe(
    user, plan: Plan, *, status: str = Subscription.Status.ACTIVE, days_left: int = 20, **fields
) -> Subscription:
    """A dev-provider subscription, as if the user had picked the plan."""
    now = timezone.now()
    return Subscription.objects.create(
        user=user,
        plan=plan,
        status=status,
        provider=Subscription.Provider.DEV,
        provider_subscription_id=f"dev-test-{uuid.uuid4().hex}",
        current_period_start=now - timedelta(days=30 - days_left),
        current_period_end=now + timedelta(days=days_left),
        **fields,
    )


@pytest.fixture
def free_user(plans):
    return make_user("free@example.com")


@pytest.fixture
def pro_user(plans):
    user = make_user("pro@example.com")
    subscribe(user, plans["pro"])
    return user


@pytest.fixture
def stripe_api(settings):
    """Stripe configured as the payment provider, with its API answered by the stand-in."""
    with stripe_stood_in(settings) as standin:
        yield standin
