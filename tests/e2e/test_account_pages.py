"""The pages around the chat: API keys, and the site header on a phone."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from accounts.api_keys import authenticate_api_key, create_api_key, revoke_api_key
from accounts.models import ApiKey
from tests.conftest import make_user
from tests.e2e.conftest import DESKTOP, PHONE
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.e2e

# Nothing in the page's content reaches past the screen's edges (text only screen readers get, in a
# 1-pixel clipped box, does not count).
FITS_SIDEWAYS = """() => {
  const width = document.documentElement.clientWidth;
  const offScreenOnly = (el) => {
    for (let node = el; node; node = node.parentElement) {
      if (node.getBoundingClientRect().width <= 1 && getComputedStyle(node).overflow === "hidden") return true;
    }
    return false;
  };
  const sticking = [...document.querySelectorAll("main *")].filter((el) => {
    const box = el.getBoundingClientRect();
    return box.width > 0 && (box.left < -0.5 || box.right > width + 0.5) && !offScreenOnly(el);
  }).map((el) => el.tagName + "." + el.className);
  return {scrollWidth: document.documentElement.scrollWidth, width, sticking};
}"""


@pytest.fixture
def pro_user(transactional_db):
    user = make_user("kai@example.com", display_name="Kai")
    put_on_plan(user, "pro")
    return user


def test_a_new_key_is_shown_once_copied_and_not_made_again_by_a_reload(open_page, pro_user):
    page = open_page("/accounts/api-keys/", user=pro_user)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_label("Name").fill("laptop script")
    page.get_by_role("button", name="Create key").click()

    shown = page.get_by_test_id("new-api-key")
    expect(shown).to_have_text(re.compile(r"^sk-sgl-"))
    raw = shown.inner_text()
    assert authenticate_api_key(raw).name == "laptop script"
    copy = page.get_by_role("button", name="Copy the new key")
    copy.click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == raw

    page.reload()
    expect(page.get_by_role("heading", name="API keys")).to_be_visible()
    expect(page.get_by_test_id("new-api-key")).to_have_count(0)  # shown once
    expect(page.locator("table.keys-table tbody tr")).to_have_count(1)
    assert ApiKey.objects.filter(user=pro_user).count() == 1
    expect(page.get_by_role("cell", name="laptop script", exact=True)).to_be_visible()


def test_the_keys_table_fits_a_phone(open_page, pro_user):
    create_api_key(
        pro_user,
        "a rather long name for the nightly export job on the build server",
        expires_at=timezone.now() + timezone.timedelta(days=90),
    )
    revoked, _ = create_api_key(pro_user, "old laptop")
    revoke_api_key(pro_user, revoked.pk)
    _, raw = create_api_key(pro_user, "ci")
    authenticate_api_key(raw)  # used just now

    page = open_page("/accounts/api-keys/", user=pro_user, viewport=PHONE)
    expect(page.get_by_role("heading", name="API keys")).to_be_visible()
    expect(page.get_by_text("just now")).to_be_visible()
    expect(page.get_by_role("link", name="Revoke ci")).to_be_in_viewport()
    fit = page.evaluate(FITS_SIDEWAYS)
    assert fit["scrollWidth"] <= PHONE["width"], fit
    assert not fit["sticking"], fit


def test_revoking_a_key_on_a_phone_asks_first_then_says_which_key_went(open_page, pro_user):
    key, raw = create_api_key(pro_user, "nightly export on the build server")
    page = open_page("/accounts/api-keys/", user=pro_user, viewport=PHONE)

    page.get_by_role("link", name="Revoke nightly export on the build server").click()

    expect(page).to_have_url(re.compile(rf"/accounts/api-keys/{key.pk}/revoke/$"))
    expect(page.get_by_text("Programs using it stop working at once. This cannot be undone.")).to_be_visible()
    revoke = page.get_by_role("button", name="Revoke key")
    cancel = page.get_by_role("link", name="Cancel")
    expect(revoke).to_be_in_viewport()
    expect(cancel).to_be_in_viewport()
    fit = page.evaluate(FITS_SIDEWAYS)
    assert fit["scrollWidth"] <= PHONE["width"] and not fit["sticking"], fit
    assert authenticate_api_key(raw) == key  # asking changed nothing

    cancel.click()
    expect(page.get_by_role("heading", name="API keys")).to_be_visible()
    assert authenticate_api_key(raw) == key

    page.get_by_role("link", name="Revoke nightly export on the build server").click()
    page.get_by_role("button", name="Revoke key").click()

    expect(page).to_have_url(re.compile(r"/accounts/api-keys/$"))
    expect(page.get_by_text(f"Revoked the key “nightly export on the build server” ({key.prefix}…)")).to_be_visible()
    expect(page.get_by_role("link", name="Revoke nightly export on the build server")).to_have_count(0)
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_on_a_phone_the_header_links_slide_over(open_page, pro_user):
    page = open_page("/billing/usage/", user=pro_user, viewport=PHONE)
    header = page.locator("header.site-header")
    menu = page.get_by_role("button", name="Menu", exact=True)
    usage_link = page.get_by_role("navigation", name="Main").get_by_role("link", name="Usage")

    # One line: the brand and the menu button; the links are off screen until asked for.
    assert header.bounding_box()["height"] <= 64
    expect(menu).to_be_visible()
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(usage_link).not_to_be_in_viewport()

    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(usage_link).to_be_in_viewport()
    expect(page.get_by_role("button", name="Sign out")).to_be_in_viewport()
    page.keyboard.press("Escape")
    expect(usage_link).not_to_be_in_viewport()
    expect(menu).to_be_focused()

    menu.click()
    page.mouse.click(20, 400)  # the dimmed page beside the menu
    expect(usage_link).not_to_be_in_viewport()
    menu.click()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Plans").click()
    expect(page).to_have_url(re.compile(r"/billing/plans/$"))
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Plans")).not_to_be_in_viewport()
    assert page.evaluate(FITS_SIDEWAYS)["scrollWidth"] <= PHONE["width"]


def test_on_a_desktop_the_header_links_stay_in_a_row(open_page, pro_user):
    page = open_page("/billing/usage/", user=pro_user, viewport=DESKTOP)
    expect(page.get_by_role("button", name="Menu", exact=True)).to_be_hidden()
    nav = page.get_by_role("navigation", name="Main")
    for name in ("Plans", "Usage", "Billing", "Account"):
        expect(nav.get_by_role("link", name=name)).to_be_in_viewport()
    assert page.locator("header.site-header").bounding_box()["height"] <= 64
