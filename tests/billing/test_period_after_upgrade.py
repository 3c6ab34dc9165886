"""The first paid period after an upgrade from Free, as the Billing and Usage pages tell it (issue 25, item 6).

Someone on Free, whose month began on 1 November, upgrades on 26 November: their subscription's first
month runs 26 November to 26 December, and its allowance counts the tokens used since 1 November (a
plan change never resets what was used: docs/billing.md, "Plan changes keep the period's usage"). The
quota period is therefore 1 November to 26 December, which the Usage page showed bare ("1 Nov to 26 Dec
2025, Plus plan") and which read as a paid period of eight weeks. The pages now say when the next
charge is and for how much (the plan's price, when a provider that takes payment charges it), and
why this period began before the plan did.
"""

from __future__ import annotations

import html
import re
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format

from billing import selectors
from billing.models import Subscription, UsageRecord
from billing.periods import Period, calendar_month
from billing.services import subscriptions
from tests.billing.stripe_payloads import event, post_webhook, subscription
from tests.support.accounts import make_staff

NOV_1 = datetime(2025, 11, 1, tzinfo=UTC)
NOV_26 = datetime(2025, 11, 26, 9, 30, tzinfo=UTC)
DEC_26 = datetime(2025, 12, 26, 9, 30, tzinfo=UTC)
NOV_27 = datetime(2025, 11, 27, 12, 0, tzinfo=UTC)
DAY = 86400


def upgraded_on_26_november(user, plan, *, provider=Subscription.Provider.STRIPE, **fields) -> Subscription:
    """A subscription that began on 26 November for someone who was on Free, as the providers store one:
    where the period they were in began is asked before the row grants anything."""
    carried = selectors.usage_carried_from(user, NOV_26)
    return Subscription.objects.create(
        user=user,
        plan=plan,
        status=fields.pop("status", Subscription.Status.ACTIVE),
        provider=provider,
        provider_subscription_id=f"sub_{uuid.uuid4().hex[:12]}",
        current_period_start=NOV_26,
        current_period_end=DEC_26,
        usage_period_start=carried,
        **fields,
    )


# --- The rule: what the overview knows -----------------------------------------------------------------


def test_the_first_period_after_an_upgrade_counts_from_the_free_months_start_to_the_paid_months_end(free_user, plans):
    # Why the page showed "1 Nov to 26 Dec": the quota period is Free's start joined to Plus's first end, on
    # purpose (the usage carried into the new allowance). This is the rule; it is not changed.
    sub = upgraded_on_26_november(free_user, plans["plus"])

    assert sub.usage_period_start == NOV_1
    assert selectors.current_period(free_user, NOV_27).period == Period(NOV_1, DEC_26)
    assert selectors.subscription_period(sub, NOV_27) == Period(NOV_1, DEC_26)


def test_the_overview_says_the_next_charge_and_why_the_period_began_before_the_plan(free_user, plans):
    upgraded_on_26_november(free_user, plans["plus"])

    overview = selectors.billing_overview(free_user, NOV_27)

    assert overview.next_charge is not None
    assert (overview.next_charge.on, overview.next_charge.plan.slug) == (DEC_26, "plus")
    assert overview.next_charge.amount == "20.00 USD"
    began = overview.began_before_plan
    assert began is not None
    assert (began.plan.slug, began.plan_started, began.counted_from, began.ends) == ("plus", NOV_26, NOV_1, DEC_26)


def test_after_the_first_renewal_the_period_is_the_paid_month_and_nothing_needs_explaining(free_user, plans):
    upgraded_on_26_november(free_user, plans["plus"])
    dec_27 = datetime(2025, 12, 27, tzinfo=UTC)

    overview = selectors.billing_overview(free_user, dec_27)

    assert overview.billing.period == Period(DEC_26, datetime(2026, 1, 26, 9, 30, tzinfo=UTC))
    assert overview.began_before_plan is None
    assert overview.next_charge.on == datetime(2026, 1, 26, 9, 30, tzinfo=UTC)


def test_a_subscription_that_began_with_its_period_has_nothing_to_explain(free_user, plans):
    # Free's month began the moment the plan did (no earlier usage to carry): the period is the plan's.
    Subscription.objects.create(
        user=free_user,
        plan=plans["plus"],
        status=Subscription.Status.ACTIVE,
        provider=Subscription.Provider.STRIPE,
        provider_subscription_id="sub_plain",
        current_period_start=NOV_26,
        current_period_end=DEC_26,
    )
    assert selectors.billing_overview(free_user, NOV_27).began_before_plan is None
    assert selectors.billing_overview(free_user, timezone.now()).began_before_plan is None  # and no subscription


@pytest.mark.parametrize(
    ("provider", "fields"),
    [
        (Subscription.Provider.DEV, {}),  # development payments: nothing is charged
        (Subscription.Provider.GIFT, {"cancel_at_period_end": True}),  # given by staff
        (Subscription.Provider.STRIPE, {"cancel_at_period_end": True}),  # ends at the period's end
        (Subscription.Provider.STRIPE, {"status": Subscription.Status.PAST_DUE, "past_due_since": NOV_26}),
    ],
    ids=["dev", "gift", "stripe-cancelling", "stripe-past-due"],
)
def test_no_charge_is_promised_where_none_is_due(free_user, plans, provider, fields):
    upgraded_on_26_november(free_user, plans["plus"], provider=provider, **fields)

    overview = selectors.billing_overview(free_user, NOV_27)

    assert overview.next_charge is None
    assert overview.began_before_plan is not None  # the period is explained all the same


def test_a_downgrade_between_paid_plans_is_charged_at_the_smaller_price(free_user, plans):
    upgraded_on_26_november(free_user, plans["pro"], scheduled_plan=plans["plus"])

    charge = selectors.billing_overview(free_user, NOV_27).next_charge

    assert (charge.on, charge.plan.slug, charge.amount) == (DEC_26, "plus", "20.00 USD")


# --- The pages ------------------------------------------------------------------------------------------


def text_of(response) -> str:
    """The page's words as a person reads them: blocks apart, inline tags dropped, entities read."""
    page = re.sub(r"</?(?:p|div|dt|dd|li|h[1-6]|section)\b[^>]*>", " ", response.content.decode())
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())


def day(moment: datetime, fmt: str = "j F") -> str:
    return date_format(timezone.localtime(moment), fmt)


@pytest.fixture
def deliver(client, django_capture_on_commit_callbacks):
    def post(payload):
        with django_capture_on_commit_callbacks(execute=True):
            return post_webhook(client, payload)

    return post


def spend(user, tokens: int) -> None:
    UsageRecord.objects.create(
        user=user,
        reservation_id=uuid.uuid4().hex,
        generation_id=uuid.uuid4().hex,
        plan_slug="free",
        model="sim-small",
        prompt_tokens=tokens,
        completion_tokens=0,
        billable_tokens=tokens,
        created=timezone.now() - timedelta(minutes=5),
    )


def test_after_a_stripe_upgrade_the_pages_say_the_next_charge_and_why_the_period_began_earlier(
    client, free_user, stripe_api, deliver
):
    spend(free_user, 11_594)  # on Free, this month
    now = int(time.time())
    start, end = now, now + 30 * DAY
    obj = subscription(
        "sub_up", customer="cus_up", plan="plus", status="active", start=start, end=end, user_id=free_user.pk
    )
    stripe_api.subscriptions["sub_up"] = obj
    deliver(event("evt_up", "customer.subscription.created", start, obj))
    client.force_login(free_user)
    began = datetime.fromtimestamp(start, tz=UTC)
    ends = datetime.fromtimestamp(end, tz=UTC)
    month_start = calendar_month(began).start
    why = (
        f"Your Plus plan began on {day(began)}. Its first period counts your tokens from {day(month_start)}, "
        f"when the period you were in began, to {day(ends)}; after that, each period lasts one month."
    )

    billing = text_of(client.get(reverse("billing:overview")))
    usage = text_of(client.get(reverse("billing:usage")))

    assert f"Next charge 20.00 USD on {day(ends, 'j F Y')}" in billing
    assert why in billing
    assert f"{day(month_start, 'j M')} \u2013 {day(ends, 'j M Y')} · Plus plan" in usage  # the range, as it was
    assert why in usage
    assert "11,594 of 5,000,000 tokens used" in usage


def test_with_development_payments_the_page_says_when_it_renews_and_charges_nothing(client, free_user):
    spend(free_user, 500)
    client.force_login(free_user)

    client.post(reverse("billing:choose_plan", args=["plus"]))

    sub = Subscription.objects.get(user=free_user)
    billing = text_of(client.get(reverse("billing:overview")))
    assert f"Renews on {day(sub.current_period_end, 'j F Y')}" in billing
    assert "Next charge" not in billing
    assert f"Your Plus plan began on {day(sub.current_period_start)}." in billing


def test_a_plan_that_began_with_its_period_gets_no_explanation(client, pro_user):
    client.force_login(pro_user)

    billing = text_of(client.get(reverse("billing:overview")))
    usage = text_of(client.get(reverse("billing:usage")))

    assert "began on" not in billing and "began on" not in usage


def test_a_plan_given_for_three_months_says_it_ends_when_the_gift_does(client, free_user, plans):
    # Its periods are a month each, but it ends after three: the page said the first month's end.
    staff = make_staff("root@example.com", is_superuser=True)
    gift = subscriptions.give_plan(free_user, plans["plus"], months=3, actor=staff, reason="Speaker")
    client.force_login(free_user)

    billing = text_of(client.get(reverse("billing:overview")))

    assert f"Ends on {day(gift.current_period_end, 'j F Y')}" in billing
    assert "Next charge" not in billing and "Renews on" not in billing
