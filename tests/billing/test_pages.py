"""The Plans, Billing and Usage pages, for a Free and a Pro user, and plan changes with the dev provider."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse
from django.utils import timezone

from billing.models import Subscription, UsageRecord
from billing.selectors import effective_plan
from tests.billing.conftest import subscribe


def ledger_row(user, tokens: int, *, days_ago: int = 0, model: str = "sim-small", cached: int = 0) -> UsageRecord:
    return UsageRecord.objects.create(
        user=user,
        reservation_id=uuid.uuid4().hex,
        generation_id=uuid.uuid4().hex,
        plan_slug="free",
        model=model,
        prompt_tokens=tokens,
        cached_tokens=cached,
        completion_tokens=0,
        billable_tokens=tokens - cached // 2,
        created=timezone.now() - timedelta(days=days_ago),
    )


def current_card(page: str) -> str:
    """The slug of the plan card marked as the current plan."""
    match = re.search(
        r'data-plan="([a-z-]+)">\s*<div class="plan-head">\s*<h2[^>]*>[^<]*</h2>\s*'
        r'<span class="badge" data-testid="current-plan">',
        page,
    )
    return match.group(1) if match else ""


@pytest.mark.parametrize(("who", "plan_name"), [("free_user", "Free"), ("pro_user", "Pro")])
def test_the_plans_page_compares_the_plans_and_marks_the_users_own(client, request, who, plan_name):
    user = request.getfixturevalue(who)
    client.force_login(user)

    response = client.get(reverse("billing:plans"))

    page = response.content.decode()
    assert response.status_code == 200
    assert current_card(page) == plan_name.lower()
    assert page.count('class="plan-card') == 3
    for figure in ("200,000", "5,000,000", "25,000,000"):  # tokens a month of Free, Plus, Pro
        assert figure in page
    assert "Development payments" in page  # the dev provider says nothing is charged
    if plan_name == "Free":
        assert "Upgrade to Plus" in page and "Upgrade to Pro" in page
    else:
        assert "Switch to Free" in page and "Switch to Plus" in page


def context_cells(page: str) -> dict[str, str]:
    """Each plan card's Context figure, by plan slug."""
    cards = re.findall(r'data-plan="([a-z-]+)">(.*?)</section>', page, re.S)
    return {
        slug: " ".join(re.search(r"<dt>Context</dt><dd>(.*?)</dd>", card, re.S).group(1).split())
        for slug, card in cards
    }


def test_the_plans_page_states_the_context_the_models_hold_not_more(client, free_user, settings):
    # The seed plans allow 4,096, 16,384 and 32,768 tokens; the models hold 8,192.
    settings.INFERENCE_CONTEXT_TOKENS = 8192
    client.force_login(free_user)

    page = client.get(reverse("billing:plans")).content.decode()

    assert context_cells(page) == {"free": "4,096 tokens", "plus": "8,192 tokens", "pro": "8,192 tokens"}
    assert "16,384" not in page and "32,768" not in page


def test_the_plans_page_compares_new_chats_a_day_and_api_keys(client, free_user):
    client.force_login(free_user)
    page = client.get(reverse("billing:plans")).content.decode()

    cards = dict(re.findall(r'data-plan="([a-z-]+)">(.*?)</section>', page, re.S))
    figures = {
        slug: [
            " ".join(re.search(rf"<dt>{name}</dt><dd>(.*?)</dd>", card, re.S).group(1).split())
            for name in ("New chats a day", "API keys")
        ]
        for slug, card in cards.items()
    }
    assert figures == {
        "free": ["100", "Not included"],
        "plus": ["500", "Up to 10 active keys"],
        "pro": ["2,000", "Up to 50 active keys"],
    }


def test_where_the_models_differ_the_plans_page_gives_each_models_window(client, free_user, settings):
    settings.INFERENCE_CONTEXT_TOKENS = 8192
    settings.INFERENCE_MODEL_CONTEXT_TOKENS = {"sim-large": 32768}
    client.force_login(free_user)

    cells = context_cells(client.get(reverse("billing:plans")).content.decode())

    assert cells["free"] == "4,096 tokens"  # Free has only the small model
    assert cells["plus"] == "8,192 tokens on Simulated Small; 16,384 on Simulated Large"
    assert cells["pro"] == "8,192 tokens on Simulated Small; 32,768 on Simulated Large"


@pytest.mark.parametrize(("who", "plan_name"), [("free_user", "Free"), ("pro_user", "Pro")])
def test_the_billing_page_shows_the_plan_status_and_renewal(client, request, who, plan_name):
    user = request.getfixturevalue(who)
    client.force_login(user)

    response = client.get(reverse("billing:overview"))

    page = response.content.decode()
    assert response.status_code == 200
    assert f'data-testid="billing-plan">{plan_name}<' in page
    assert 'data-testid="renewal"' in page
    if plan_name == "Pro":
        assert "Active" in page and "Renews on" in page
    else:
        assert "Allowance renews on" in page


def test_the_billing_page_warns_a_past_due_subscriber_when_the_grace_ends(client, free_user, plans):
    subscribe(
        free_user, plans["plus"], status=Subscription.Status.PAST_DUE, past_due_since=timezone.now() - timedelta(days=2)
    )
    client.force_login(free_user)

    page = client.get(reverse("billing:overview")).content.decode()

    assert 'data-testid="past-due"' in page
    assert "did not go through" in page


@pytest.mark.parametrize(
    ("who", "plan_name", "allowance"), [("free_user", "Free", "200,000"), ("pro_user", "Pro", "25,000,000")]
)
def test_the_usage_page_shows_the_period_against_the_quota_and_a_30_day_chart(
    client, request, who, plan_name, allowance
):
    user = request.getfixturevalue(who)
    ledger_row(user, 1_500, cached=1_000)
    ledger_row(user, 700, model="sim-large")
    client.force_login(user)

    response = client.get(reverse("billing:usage"))

    page = response.content.decode()
    assert response.status_code == 200
    assert f"of {allowance} tokens used" in page
    assert "<strong>1,700</strong>" in page  # 1,000 + 700 counted (the cached 1,000 at half)
    assert f"{plan_name} plan" in page
    assert "sim-large" in page and "sim-small" in page
    # The chart gets its data from a json_script element and draws it with the vendored Chart.js.
    data = json.loads(
        re.search(r'<script id="usage-chart-data" type="application/json">(.*?)</script>', page, re.S).group(1)
    )
    assert len(data["labels"]) == len(data["tokens"]) == 30
    assert data["tokens"][-1] == 1_700 and sum(data["tokens"]) == 1_700
    assert "vendor/chart.js/chart.umd.js" in page and "billing/usage-chart.js" in page


def test_the_usage_page_says_so_when_nothing_was_used(client, free_user):
    client.force_login(free_user)

    page = client.get(reverse("billing:usage")).content.decode()

    assert 'data-testid="no-usage"' in page
    assert "<strong>0</strong> of 200,000 tokens used" in page


def test_chart_js_is_vendored_with_its_license():
    assert finders.find("vendor/chart.js/chart.umd.js")
    assert finders.find("vendor/chart.js/LICENSE.md")
    assert finders.find("billing/usage-chart.js")


@pytest.mark.parametrize("name", ["billing:plans", "billing:overview", "billing:usage"])
def test_the_pages_are_for_signed_in_users(client, db, name):
    response = client.get(reverse(name))

    assert response.status_code == 302
    assert response.url.startswith(reverse("account_login"))


def test_with_the_dev_provider_an_upgrade_takes_effect_on_click_and_a_downgrade_at_the_period_end(client, free_user):
    client.force_login(free_user)

    upgraded = client.post(reverse("billing:choose_plan", args=["pro"]), follow=True)

    assert effective_plan(free_user).slug == "pro"
    assert "You are now on the Pro plan" in upgraded.content.decode()
    assert "nothing was charged" in upgraded.content.decode()

    client.post(reverse("billing:choose_plan", args=["free"]))

    assert effective_plan(free_user).slug == "pro"
    pending = Subscription.objects.get(user=free_user)
    assert pending.status == Subscription.Status.ACTIVE and pending.cancel_at_period_end
    assert pending.ended_at is None


def test_choosing_the_current_or_an_unknown_plan_is_refused_with_a_reason(client, free_user):
    client.force_login(free_user)

    same = client.post(reverse("billing:choose_plan", args=["free"]))
    unknown = client.post(reverse("billing:choose_plan", args=["platinum"]))

    assert same.status_code == 400
    assert "already on the Free plan" in same.content.decode()
    assert unknown.status_code == 404
    assert "no plan called" in unknown.content.decode()


def test_plan_changes_need_a_post(client, free_user):
    client.force_login(free_user)

    assert client.get(reverse("billing:choose_plan", args=["pro"])).status_code == 405
    assert effective_plan(free_user).slug == "free"


def test_the_dev_provider_has_no_portal_and_says_so(client, free_user):
    client.force_login(free_user)

    response = client.post(reverse("billing:portal"), follow=True)

    assert response.redirect_chain[-1][0] == reverse("billing:overview")
    assert "nothing to manage yet" in response.content.decode()


def test_the_navigation_links_to_the_billing_pages(client, free_user):
    client.force_login(free_user)

    page = client.get(reverse("billing:usage")).content.decode()

    for name in ("billing:plans", "billing:usage", "billing:overview"):
        assert f'href="{reverse(name)}"' in page
