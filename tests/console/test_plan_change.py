"""Staff change someone's plan through billing's services, with a reason in the audit log: given at no
charge for some months, or a smaller plan at the end of the paid period. Editing the subscription's
row by hand drifted from Stripe (issue 24)."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEntry
from billing.models import Plan, Subscription
from billing.periods import add_months
from billing.selectors import current_period, usage_summary
from billing.services import subscriptions
from billing.services.subscriptions import roll_over_periods
from config.refusals import BadInput
from tests.conftest import make_user
from tests.console.test_users import subscribe

from .conftest import usage


def plan_page(user) -> str:
    return reverse("admin:accounts_user_plan", args=[user.pk])


def test_staff_give_a_plan_at_no_charge_and_its_period_keeps_what_was_used(admin_client, superuser):
    ada = make_user("ada@example.com")
    usage(ada, 1500)  # used on Free this month: still counted on the plan given
    pro = Plan.objects.get(slug="pro")

    page = admin_client.get(reverse("admin:accounts_user_change", args=[ada.pk])).content.decode()
    assert plan_page(ada) in page  # the "Change plan…" button on the person's page

    response = admin_client.post(
        plan_page(ada), {"plan": pro.pk, "how": "give", "months": 3, "reason": "Conference speaker"}
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    billing = current_period(ada)
    assert billing.plan == pro and billing.subscription.provider == Subscription.Provider.GIFT
    ends = billing.subscription.current_period_end
    assert timedelta(days=88) < ends - timezone.now() < timedelta(days=93)
    assert usage_summary(ada).billable_tokens == 1500
    entry = AuditEntry.objects.get(action="billing.plan_given")
    assert (entry.actor, entry.target_id, entry.reason) == (superuser, str(ada.pk), "Conference speaker")
    assert entry.details["plan"] == "pro"
    followed = admin_client.get(response["Location"]).content.decode()
    assert "has the Pro plan at no charge until" in followed


def test_a_reason_is_required_and_nothing_changes_without_it(admin_client):
    ada = make_user("ada@example.com")
    pro = Plan.objects.get(slug="pro")

    response = admin_client.post(plan_page(ada), {"plan": pro.pk, "how": "give", "months": 1, "reason": " "})

    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    assert not Subscription.objects.exists() and not AuditEntry.objects.filter(action__startswith="billing.").exists()


def test_a_plan_is_given_only_to_someone_without_a_subscription_of_their_own(admin_client):
    """Beside a paid one, the person would go on paying for a plan the gift hides."""
    ada = make_user("ada@example.com")
    subscribe(ada, "plus")  # paying through Stripe
    pro = Plan.objects.get(slug="pro")

    response = admin_client.post(plan_page(ada), {"plan": pro.pk, "how": "give", "months": 1, "reason": "Goodwill"})

    assert response.status_code == 200
    assert "has the Plus plan through Stripe: a plan is given only to someone without" in response.content.decode()
    assert Subscription.objects.count() == 1


def test_a_gift_of_several_months_gives_a_months_allowance_each_month(superuser):
    ada = make_user("ada@example.com")
    now = timezone.now()
    gift = subscriptions.give_plan(
        ada, Plan.objects.get(slug="pro"), months=3, actor=superuser, reason="Speaker", now=now
    )

    # The first month also counts what was used on Free since its month began (as any plan change does).
    first = current_period(ada, now + timedelta(days=1)).period
    second = current_period(ada, now + timedelta(days=40)).period
    assert first.end == second.start == add_months(now, 1)
    assert second.end == add_months(now, 2) < gift.current_period_end
    assert current_period(ada, gift.current_period_end - timedelta(days=1)).period.end == gift.current_period_end


def test_a_gift_given_again_keeps_what_was_used_this_period(superuser):
    ada = make_user("ada@example.com")
    plus, pro = Plan.objects.get(slug="plus"), Plan.objects.get(slug="pro")
    subscriptions.give_plan(ada, plus, months=1, actor=superuser, reason="Beta tester")
    usage(ada, 700, plan_slug="plus")

    subscriptions.give_plan(ada, pro, months=2, actor=superuser, reason="Now a speaker too")

    assert current_period(ada).plan == pro
    assert usage_summary(ada).billable_tokens == 700
    assert AuditEntry.objects.filter(action="billing.plan_given").latest("pk").details["replaced"]


def test_a_smaller_plan_at_the_end_of_the_period_goes_through_the_provider(admin_client, superuser):
    ada = make_user("ada@example.com")
    subscribe(ada, "pro")
    Subscription.objects.filter(user=ada).update(provider=Subscription.Provider.DEV)  # charges nothing
    plus, free = Plan.objects.get(slug="plus"), Plan.objects.get(slug="free")

    response = admin_client.post(plan_page(ada), {"plan": plus.pk, "how": "schedule", "reason": "Asked by email"})

    assert response.status_code == 302, response.content.decode()[:2000]
    subscription = Subscription.objects.get(user=ada)
    assert subscription.plan.slug == "pro" and subscription.scheduled_plan == plus  # Pro until the period ends
    entry = AuditEntry.objects.get(action="billing.plan_change_scheduled")
    assert (entry.reason, entry.details["from"], entry.details["to"]) == ("Asked by email", "pro", "plus")

    # On Stripe a smaller paid plan changes what the customer is charged: theirs to choose in the portal.
    Subscription.objects.filter(user=ada).update(provider=Subscription.Provider.STRIPE, scheduled_plan=None)
    with pytest.raises(BadInput, match="made by the customer in Stripe's portal"):
        subscriptions.schedule_plan_change(ada, plus, actor=superuser, reason="Asked by email")
    assert free.is_default


def test_a_given_plan_ends_on_its_own_and_the_person_cannot_change_or_keep_it(superuser):
    ada = make_user("ada@example.com")
    gift = subscriptions.give_plan(ada, Plan.objects.get(slug="plus"), months=1, actor=superuser, reason="Beta tester")
    with pytest.raises(BadInput, match="was given to you by staff until"):
        subscriptions.change_plan(ada, "pro", urls=None)

    roll_over_periods(now=gift.current_period_end + timedelta(minutes=1))

    gift.refresh_from_db()
    assert gift.status == Subscription.Status.CANCELED
    assert current_period(ada, gift.current_period_end + timedelta(minutes=1)).plan.is_default


def test_moderators_cannot_change_plans(moderator_client):
    ada = make_user("ada@example.com")
    assert moderator_client.get(plan_page(ada)).status_code == 403
    page = moderator_client.get(reverse("admin:accounts_user_change", args=[ada.pk])).content.decode()
    assert plan_page(ada) not in page
    # Their overview leaves out billing (plan, usage, the ledger), which is not theirs to see.
    overview = page.split('aria-label="Overview"')[1].split("</section>")[0]
    assert "Tokens this period" not in overview and "Recent activity" in overview


def test_the_person_is_told_their_plan_was_given_and_until_when(superuser, client):
    ada = make_user("ada@example.com")
    subscriptions.give_plan(ada, Plan.objects.get(slug="pro"), months=2, actor=superuser, reason="Beta tester")
    client.force_login(ada)

    overview = client.get(reverse("billing:overview")).content.decode()
    assert "No charge: given by staff" in overview and "a month" not in overview
    assert "Your Pro plan was given to you by staff until" in overview
    assert "Keep my Pro plan" not in overview
    plans = client.get(reverse("billing:plans")).content.decode()
    assert "Subscribe to Pro through" not in plans
    assert "Yours to choose from" in plans and "Upgrade to" not in plans and "Switch to" not in plans
