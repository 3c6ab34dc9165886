"""The first page a visitor sees: what the product is, the plans and prices, and the way in."""

import re

import pytest
from playwright.sync_api import expect

from billing.models import Plan
from billing.seed import seed_plans
from tests.e2e.conftest import PHONE

pytestmark = pytest.mark.e2e


@pytest.fixture
def plans(transactional_db):
    seed_plans(Plan)  # a transactional test's flush empties the seeded table


def test_a_visitor_sees_the_plans_and_signs_up_from_a_phone(open_page, plans):
    page = open_page("/", viewport=PHONE)
    expect(page.get_by_role("heading", level=1)).to_contain_text("large language models")
    expect(page.get_by_role("note")).to_contain_text("Simulated engine")
    for plan in Plan.objects.filter(is_public=True):
        card = page.locator(f"[data-plan='{plan.slug}']")
        expect(card.get_by_role("heading", name=plan.name)).to_be_visible()
        expect(card.locator(".plan-price")).to_contain_text(plan.monthly_price)
    # The context each plan gives on the models offered (8,192 tokens here), never a bigger promise.
    for slug, context in (("free", "4,096 tokens"), ("plus", "8,192 tokens"), ("pro", "8,192 tokens")):
        facts = page.locator(f"[data-plan='{slug}'] .facts")
        expect(facts.locator("div", has=page.locator("dt:text-is('Context')")).locator("dd")).to_have_text(context)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]

    page.get_by_role("link", name="Sign up free").click()
    expect(page).to_have_url(re.compile(r"/accounts/signup/$"))
    expect(page.get_by_label("Email")).to_be_visible()


def test_signed_in_people_get_the_chat_at_the_same_address(open_chat, plans):
    chat = open_chat("/")
    expect(chat.prompt).to_be_visible()
    expect(chat.page.get_by_role("heading", name="Plans")).to_have_count(0)
