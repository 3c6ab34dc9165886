"""The users list: each user's plan and usage this period, in the same number of queries for any page."""

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.api_keys import create_api_key
from billing.models import Plan, Subscription, UsageRecord
from billing.selectors import usage_summary
from moderation.models import Flag
from tests.chat.factories import conversation_for, exchange
from tests.conftest import make_user

from .conftest import usage


def subscribe(user, slug: str) -> None:
    now = timezone.now()
    Subscription.objects.create(
        user=user,
        plan=Plan.objects.get(slug=slug),
        status=Subscription.Status.ACTIVE,
        provider="stripe",
        provider_subscription_id=f"sub_{user.pk}",
        current_period_start=now - timedelta(days=3),
        current_period_end=now + timedelta(days=27),
    )


def test_the_list_shows_each_users_plan_and_usage_this_period(admin_client):
    ada, grace = make_user("ada@example.com"), make_user("grace@example.com")
    subscribe(ada, "pro")
    usage(ada, 1234, plan_slug="pro")
    old = usage(ada, 99999)
    UsageRecord.objects.filter(pk=old.pk).update(created=timezone.now() - timedelta(days=10))  # before the period
    usage(grace, 77)

    page = admin_client.get(reverse("admin:accounts_user_changelist")).content.decode()

    rows = {line.split("</th>")[0]: line for line in page.split('<th class="field-email">')[1:]}
    ada_row = next(row for key, row in rows.items() if "ada@example.com" in key)
    grace_row = next(row for key, row in rows.items() if "grace@example.com" in key)
    assert "Pro" in ada_row and "1,234 of 25M" in ada_row
    assert "Free" in grace_row and "77 of 200k" in grace_row


def test_the_list_costs_the_same_queries_for_three_users_or_thirty(admin_client):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(reverse("admin:accounts_user_changelist")).status_code == 200
        return len(captured)

    for n in range(3):
        subscribe(make_user(f"a{n}@example.com"), "pro")
    few = queries()
    for n in range(3, 30):
        user = make_user(f"a{n}@example.com")
        subscribe(user, "pro")
        usage(user, 5, plan_slug="pro")

    assert queries() == few


def test_search_finds_users_by_email(admin_client):
    make_user("ada@example.com")
    make_user("grace@example.com")

    page = admin_client.get(reverse("admin:accounts_user_changelist"), {"q": "grace"}).content.decode()

    assert "grace@example.com" in page and "ada@example.com" not in page


def test_usage_carried_into_a_new_plan_is_what_the_user_sees_too(admin_client):
    """Upgraded mid-month: the tokens used on Free count in Pro's first cycle. The console said "0 of
    25M" while the user's page said 88 (issue 24): one selector decides a user's usage in the period."""
    ada = make_user("ada@example.com")
    used_on_free = usage(ada, 88)
    UsageRecord.objects.filter(pk=used_on_free.pk).update(created=timezone.now() - timedelta(days=2))
    subscribe(ada, "pro")
    Subscription.objects.filter(user=ada).update(
        current_period_start=timezone.now() - timedelta(hours=1),
        usage_period_start=timezone.now() - timedelta(days=5),
    )

    page = admin_client.get(reverse("admin:accounts_user_changelist")).content.decode()

    assert usage_summary(ada).billable_tokens == 88
    [row] = [line for line in page.split('<th class="field-email">')[1:] if "ada@example.com" in line.split("</th>")[0]]
    assert "88 of 25M" in row


def test_a_users_page_shows_plan_usage_keys_activity_and_flags_in_one_place_and_nothing_they_wrote(admin_client):
    """Staff had to open five lists to see one person (issue 24)."""
    ada = make_user("ada@example.com")
    subscribe(ada, "pro")
    usage(ada, 4321, plan_slug="pro")
    create_api_key(ada, "laptop script")
    conversation = conversation_for(ada, title="Divorce lawyer questions")
    exchange(conversation, "Who gets the house?", "It depends on the jurisdiction.")
    Flag.objects.create(user=ada, source="input", category="harassment", blocked=True, text="a private insult")

    page = admin_client.get(reverse("admin:accounts_user_change", args=[ada.pk])).content.decode()
    overview = page.split('aria-label="Overview"')[1].split("</section>")[0]

    assert "<strong>Pro</strong> · Stripe, active" in overview
    assert "4,321 of 25,000,000" in overview
    assert "1 active of 1" in overview and "laptop script" in overview and "never used" in overview
    assert f"#{conversation.pk}</a>" in overview and "2 messages" in overview
    assert "1 flag in 30 days, 1 blocked; 1 open" in overview and "harassment" in overview
    for private in ("Divorce lawyer questions", "Who gets the house?", "jurisdiction", "a private insult"):
        assert private not in page
    # Each card's link opens the full list filtered to this person (not a text search on their address).
    for listing in ("billing_usagerecord", "billing_subscription", "accounts_apikey", "moderation_flag"):
        link = f"{reverse(f'admin:{listing}_changelist')}?user__id__exact={ada.pk}"
        assert link in overview
        assert admin_client.get(link).status_code == 200
