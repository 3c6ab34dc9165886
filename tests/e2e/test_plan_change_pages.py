"""A scheduled downgrade as a person sees it (dev provider): chosen on the Plans page, announced on
Billing and Usage with the date, undone with "Keep my plan"; and deleting one's account from Your data.

Screenshots of the Billing page with the scheduled downgrade go to a temporary directory, or to
docs/screenshots/ with E2E_SCREENSHOTS=1.
"""

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.formats import date_format
from playwright.sync_api import expect

from billing.models import Subscription, UsageRecord
from tests.conftest import PASSWORD, make_user
from tests.e2e.conftest import DESKTOP, PHONE
from tests.e2e.test_account_pages import FITS_SIDEWAYS
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.e2e


@pytest.fixture
def plus_user(transactional_db):
    user = make_user("mia@example.com", display_name="Mia")
    put_on_plan(user, "plus")
    UsageRecord.objects.create(
        user=user,
        reservation_id=uuid.uuid4().hex,
        generation_id=uuid.uuid4().hex,
        plan_slug="plus",
        model="sim-small",
        prompt_tokens=11_594,
        completion_tokens=0,
        billable_tokens=11_594,
    )
    return user


def test_a_downgrade_is_scheduled_shown_and_undone_in_the_browser(open_page, plus_user):
    ends = date_format(timezone.localtime(Subscription.objects.get(user=plus_user).current_period_end), "j F")
    page = open_page("/billing/plans/", user=plus_user)

    page.get_by_role("button", name="Switch to Free").click()

    expect(page).to_have_url("/billing/")
    notice = f"Your Plus plan ends on {ends}; then you move to Free."
    expect(page.get_by_test_id("scheduled-change")).to_contain_text(notice)
    expect(page.get_by_text(f"Your Plus plan continues until {ends}; then you move to Free.")).to_be_visible()
    expect(page.get_by_text("Thank you")).to_have_count(0)
    expect(page.get_by_test_id("billing-plan")).to_have_text("Plus")
    page.goto("/billing/usage/")
    expect(page.get_by_test_id("scheduled-change")).to_contain_text(notice)
    expect(page.get_by_test_id("quota")).to_contain_text("11,594 of 5,000,000 tokens used")

    page.get_by_role("button", name="Keep my Plus plan").click()

    expect(page.get_by_text(f"You stay on the Plus plan; it renews on {ends}.")).to_be_visible()
    expect(page.get_by_test_id("scheduled-change")).to_have_count(0)
    assert not Subscription.objects.get(user=plus_user).cancel_at_period_end


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize(("size", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_screenshots_billing_with_a_scheduled_downgrade(open_page, plus_user, screenshot_dir, theme, size, viewport):
    Subscription.objects.filter(user=plus_user).update(cancel_at_period_end=True)
    page = open_page("/billing/", user=plus_user, viewport=viewport, theme=theme)

    expect(page.get_by_test_id("scheduled-change")).to_be_visible()
    fit = page.evaluate(FITS_SIDEWAYS)
    assert fit["scrollWidth"] <= fit["width"] and not fit["sticking"], fit
    page.screenshot(path=screenshot_dir / f"billing-scheduled-{size}-{theme}.png", full_page=True)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_plans_page_states_what_each_plan_gives_as_the_models_hold_it(open_page, plus_user, viewport, settings):
    assert settings.INFERENCE_CONTEXT_TOKENS == 8192  # the live server's models, as in a default install
    page = open_page("/billing/plans/", user=plus_user, viewport=viewport)

    facts = {
        "free": ("4,096 tokens", "100", "Not included"),
        "plus": ("8,192 tokens", "500", "Up to 10 active keys"),
        "pro": ("8,192 tokens", "2,000", "Up to 50 active keys"),
    }
    for slug, (context, new_chats, api_keys) in facts.items():
        card = page.locator(f"[data-plan='{slug}']")
        for name, value in (("Context", context), ("New chats a day", new_chats), ("API keys", api_keys)):
            expect(card.locator("div", has=page.locator(f"dt:text-is('{name}')")).locator("dd")).to_have_text(value)
    expect(page.get_by_text("16,384")).to_have_count(0)
    expect(page.get_by_text("32,768")).to_have_count(0)
    fit = page.evaluate(FITS_SIDEWAYS)
    assert fit["scrollWidth"] <= fit["width"] and not fit["sticking"], fit


def test_after_an_upgrade_on_a_phone_billing_says_why_the_period_began_before_the_plan(open_page):
    # On Free since this month began; upgraded today: the first period counts from the month's start.
    user = make_user("noa@example.com", display_name="Noa")
    put_on_plan(user, "free")
    page = open_page("/billing/plans/", user=user, viewport=PHONE)

    page.get_by_role("button", name="Upgrade to Plus").click()

    expect(page).to_have_url("/billing/")
    sub = Subscription.objects.get(user=user)
    began = date_format(timezone.localtime(sub.current_period_start), "j F")
    note = page.get_by_test_id("period-note")
    expect(note).to_contain_text(f"Your Plus plan began on {began}. Its first period counts your tokens from")
    expect(note).to_be_in_viewport()
    expect(page.get_by_text("Renews on")).to_be_visible()  # development payments: no charge to state
    fit = page.evaluate(FITS_SIDEWAYS)
    assert fit["scrollWidth"] <= fit["width"] and not fit["sticking"], fit
    page.goto("/billing/usage/")
    expect(page.get_by_test_id("period-note")).to_be_visible()


def test_deleting_my_account_from_your_data(open_page, plus_user):
    page = open_page("/accounts/data/", user=plus_user, viewport=PHONE)
    fit = page.evaluate(FITS_SIDEWAYS)
    assert fit["scrollWidth"] <= fit["width"] and not fit["sticking"], fit

    page.get_by_label("Your password, to confirm").fill("not it")
    page.get_by_role("button", name="Delete my account").click()
    expect(page.get_by_test_id("delete-refused")).to_have_text(
        "That password is not right. Your account was not deleted."
    )

    page.get_by_label("Your password, to confirm").fill(PASSWORD)
    page.get_by_role("button", name="Delete my account").click()

    expect(page.get_by_text("Your account was deleted.")).to_be_visible()
    assert not get_user_model().objects.filter(email="mia@example.com").exists()
    assert UsageRecord.objects.get().user is None
