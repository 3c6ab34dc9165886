"""A new staff member's first hour: sign in, enrol an authenticator app, open the staff console.

Done in a real browser exactly as a person would: the pages load with their icon and static files, and
the code typed in is computed from the secret the page shows (as an authenticator app would).
"""

import re

import pytest
from allauth.mfa.models import Authenticator
from playwright.sync_api import expect

from tests.conftest import PASSWORD, make_user
from tests.support.accounts import authenticator_code

pytestmark = pytest.mark.e2e

# What Chromium itself sends for the site icon it asks for beside every page (an image request).
FETCH_SITE_ICON = """() => new Promise((resolve) => {
  const icon = new Image();
  icon.onload = () => resolve("loaded");
  icon.onerror = () => resolve("failed");
  icon.src = "/favicon.ico";
})"""


def sign_in(page, email: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign In").click()


# The QR code must be readable by a phone camera: dark modules on a light background, in either theme.
QR_BACKGROUND = """(img) => getComputedStyle(img).backgroundColor"""


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_new_staff_enrol_an_authenticator_and_open_the_staff_console(open_page, theme):
    staff = make_user("operator@example.com", staff=True)
    page = open_page(None, theme=theme)
    static_failures = []
    page.on("response", lambda r: "/static/" in r.url and not r.ok and static_failures.append(r.url))

    sign_in(page, staff.email)

    # Straight to the enrolment page: a password typed seconds ago is not asked for again.
    expect(page).to_have_url(re.compile(r"/accounts/2fa/totp/activate/$"))
    expect(page.get_by_role("heading", name="Activate Authenticator App")).to_be_visible()
    # The browser fetches the site icon beside the page (Chromium does so for any page); it must load
    # as an icon and leave the secret on screen as it is.
    assert page.evaluate(FETCH_SITE_ICON) == "loaded"

    secret = page.get_by_label("Authenticator secret").input_value()
    qr_code = page.get_by_role("img", name=secret)
    expect(qr_code).to_be_visible()
    assert qr_code.evaluate(QR_BACKGROUND) == "rgb(255, 255, 255)"
    page.get_by_label("Authenticator code").fill(authenticator_code(secret))
    page.get_by_role("button", name="Activate").click()

    expect(page.get_by_role("heading", name="Recovery Codes")).to_be_visible()
    assert Authenticator.objects.filter(user=staff, type=Authenticator.Type.TOTP).exists()

    page.goto("/admin/")
    expect(page.get_by_role("heading", name="Dashboard", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Staff console")).to_be_visible()
    assert not static_failures, f"static files that did not load: {static_failures}"
