"""The account pages (allauth's, drawn as the product) offer only what does something, and their buttons
look and sit like the product's (issue 24: "Re-send verification" on a verified address, an empty
"Connected accounts" without single sign-on, "Download codes Generate new codes" run together)."""

import pytest
from allauth.account.models import EmailAddress
from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes
from playwright.sync_api import expect

from tests.conftest import PASSWORD, make_user
from tests.support.accounts import make_staff

pytestmark = pytest.mark.e2e

BUTTON_LOOK = """(element) => {
  const style = getComputedStyle(element);
  return {background: style.backgroundColor, padding: style.paddingLeft, radius: style.borderRadius};
}"""


def test_the_email_page_offers_only_the_actions_that_do_something(open_page, screenshot_dir):
    ada = make_user("ada@example.com")
    page = open_page("/accounts/email/", user=ada)
    expect(page.get_by_role("heading", name="Email Addresses")).to_be_visible()
    expect(page.get_by_text("ada@example.com")).to_be_visible()
    expect(page.get_by_text("Verified", exact=True)).to_be_visible()
    # One address, verified and primary: nothing to re-send, make primary or remove.
    for action in ("Re-send Verification", "Make Primary", "Remove"):
        expect(page.get_by_role("button", name=action)).to_have_count(0)

    EmailAddress.objects.create(user=ada, email="ada@work.example.com", verified=False, primary=False)
    page.reload()
    expect(page.get_by_text("Unverified", exact=True)).to_be_visible()
    for action in ("Re-send Verification", "Make Primary", "Remove"):
        expect(page.get_by_role("button", name=action)).to_be_visible()
    page.screenshot(path=screenshot_dir / "account-email-light.png", full_page=True)


def test_without_single_sign_on_the_account_pages_do_not_offer_connected_accounts(open_page):
    page = open_page("/accounts/password/change/", user=make_user("ada@example.com"))
    tabs = page.get_by_role("navigation", name="Account settings")
    expect(tabs.get_by_role("link", name="Password")).to_be_visible()
    expect(tabs.get_by_role("link", name="Connected accounts")).to_have_count(0)


def test_the_recovery_codes_actions_are_two_buttons_side_by_side_with_room_between(open_page, screenshot_dir):
    staff = make_staff("operator@example.com")
    RecoveryCodes.activate(staff)
    page = open_page("/accounts/2fa/recovery-codes/", user=staff)
    # Codes are shown only to someone who has just typed their password.
    expect(page.get_by_role("heading", name="Confirm Access")).to_be_visible()
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("heading", name="Recovery Codes")).to_be_visible()

    download = page.get_by_role("link", name="Download codes")
    generate = page.get_by_role("link", name="Generate new codes")
    expect(download).to_be_visible()
    expect(generate).to_be_visible()
    for action in (download, generate):
        look = action.evaluate(BUTTON_LOOK)
        assert look["background"] != "rgba(0, 0, 0, 0)" and look["padding"] != "0px", look  # drawn as a button
    first, second = download.bounding_box(), generate.bounding_box()
    apart = second["x"] - (first["x"] + first["width"]) if second["y"] < first["y"] + first["height"] else 99
    assert apart >= 8, (first, second)
    page.screenshot(path=screenshot_dir / "account-recovery-codes-light.png", full_page=True)


def test_a_staff_members_header_names_them_once_and_links_the_console(open_page):
    """staff@example.com (make run's staff user) read "staff … Staff": their name, then the console's link."""
    staff = make_staff("staff@example.com")
    page = open_page("/accounts/email/", user=staff)
    header = page.get_by_role("navigation", name="Main")
    expect(header.get_by_role("link", name="Console")).to_have_attribute("href", "/admin/")
    assert header.inner_text().lower().count("staff") == 1, header.inner_text()
