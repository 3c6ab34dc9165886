"""Notices ("Successfully signed in", a plan change) appear on the page where they happen, briefly."""

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import PASSWORD, make_user
from tests.e2e.chatpage import TIMEOUT

pytestmark = pytest.mark.e2e


def test_the_sign_in_notice_shows_on_the_chat_page_briefly_and_not_later_elsewhere(open_page):
    user = make_user("lin@example.com", display_name="Lin")
    page = open_page("/accounts/login/")
    page.get_by_label("Email").fill(user.email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign In").click()

    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.locator("#main[data-ready='true']")).to_be_attached(timeout=TIMEOUT)
    notice = page.get_by_role("status").filter(has_text="Successfully signed in as Lin")
    expect(notice).to_be_visible()
    # It goes away by itself, and it does not cover the composer meanwhile.
    expect(page.get_by_role("textbox", name="Message", exact=True)).to_be_editable()
    expect(notice).to_be_hidden(timeout=TIMEOUT)

    # Minutes later, on another page, it is not shown again.
    page.goto("/billing/usage/")
    expect(page.get_by_role("heading", name="Usage", level=1)).to_be_visible()
    expect(page.get_by_text("Successfully signed in")).to_have_count(0)


def test_a_notice_on_the_chat_page_can_be_dismissed(open_page):
    user = make_user("lin@example.com", display_name="Lin")
    page = open_page("/accounts/login/", viewport={"width": 390, "height": 844})
    page.get_by_label("Email").fill(user.email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign In").click()

    notice = page.get_by_role("status").filter(has_text="Successfully signed in")
    expect(notice).to_be_in_viewport()
    expect(page.locator("#toasts[data-ready='true']")).to_be_attached()  # its script has run
    notice.get_by_role("button", name="Dismiss").click()
    expect(notice).to_be_hidden()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
