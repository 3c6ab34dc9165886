import time
from types import SimpleNamespace

from allauth.account.authentication import AUTHENTICATION_METHODS_SESSION_KEY
from allauth.mfa.models import Authenticator
from allauth.mfa.totp.internal import auth as totp_auth
from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, generate_totp_secret, hotp_value
from allauth.mfa.utils import decrypt
from django.test import Client
from django.urls import reverse

from tests.support.accounts import authenticator_code

# What Chromium sends for the site icon it fetches beside a page, and for a script's fetch().
ICON_REQUEST = {
    "HTTP_ACCEPT": "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8",
    "HTTP_SEC_FETCH_DEST": "image",
}
SCRIPT_REQUEST = {"HTTP_ACCEPT": "*/*", "HTTP_SEC_FETCH_DEST": "empty"}
PAGE_REQUEST = {"HTTP_ACCEPT": "text/html,application/xhtml+xml,*/*;q=0.8", "HTTP_SEC_FETCH_DEST": "document"}


def test_staff_without_an_authenticator_must_set_one_up_first(client, staff_user, password):
    client.post(reverse("account_login"), {"login": staff_user.email, "password": password})

    for url in (reverse("home"), reverse("admin:index")):
        response = client.get(url, **PAGE_REQUEST)
        assert response.status_code == 302
        assert response.url == reverse("mfa_activate_totp")

    # The setup page opens at once: the password typed moments ago is not asked for again.
    response = client.get(reverse("mfa_activate_totp"), **PAGE_REQUEST)
    assert response.status_code == 200
    assert 'name="code"' in response.content.decode()


def test_a_sign_in_some_minutes_ago_is_confirmed_again_before_setup(client, staff_user, password):
    client.post(reverse("account_login"), {"login": staff_user.email, "password": password})
    session = client.session
    session[AUTHENTICATION_METHODS_SESSION_KEY] = [
        {**record, "at": record["at"] - 301} for record in session[AUTHENTICATION_METHODS_SESSION_KEY]
    ]
    session.save()

    response = client.get(reverse("mfa_activate_totp"))
    assert response.status_code == 302 and response.url.startswith(reverse("account_reauthenticate"))
    response = client.post(response.url, {"password": password})
    assert response.status_code == 302 and response.url == reverse("mfa_activate_totp")
    response = client.get(reverse("mfa_activate_totp"))
    assert response.status_code == 200
    assert 'name="code"' in response.content.decode()


def test_requests_that_are_not_pages_leave_the_secret_on_screen_valid(client, staff_user, password):
    client.post(reverse("account_login"), {"login": staff_user.email, "password": password})
    shown = client.get(reverse("mfa_activate_totp"), **PAGE_REQUEST).context["form"].secret

    # The icon is served, not sent to the setup page.
    icon = client.get("/favicon.ico", **ICON_REQUEST)
    assert icon.status_code == 301 and icon.url.endswith(".png")
    # A script's request is refused with a reason, not redirected.
    refused = client.get(reverse("chat:conversations"), **SCRIPT_REQUEST)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "two_factor_required"
    assert "two-factor" in refused.json()["error"]["message"]
    image = client.get("/billing/usage/", **ICON_REQUEST)
    assert image.status_code == 403 and "two-factor" in image.content.decode()
    # Even a second visit to the page (a reload, another tab) shows the same secret.
    assert client.get(reverse("mfa_activate_totp"), **PAGE_REQUEST).context["form"].secret == shown

    response = client.post(reverse("mfa_activate_totp"), {"code": authenticator_code(shown)})
    assert response.status_code == 302
    assert Authenticator.objects.filter(user=staff_user, type=Authenticator.Type.TOTP).exists()
    assert client.get(reverse("admin:index"), **PAGE_REQUEST).status_code == 200


def test_ordinary_users_are_not_forced_to_enrol(user_client):
    assert user_client.get(reverse("home")).status_code == 200


def test_staff_with_totp_signs_in_with_a_code_and_reaches_the_admin(client, staff_user, password):
    secret = generate_totp_secret()
    TOTP.activate(staff_user, secret)

    # The password alone does not sign a staff member in: a code is asked for.
    response = client.post(reverse("account_login"), {"login": staff_user.email, "password": password})
    assert response.status_code == 302 and response.url == reverse("mfa_authenticate")
    assert "_auth_user_id" not in client.session

    # A wrong code is refused.
    response = client.post(reverse("mfa_authenticate"), {"code": "000000"})
    assert "_auth_user_id" not in client.session

    response = client.post(reverse("mfa_authenticate"), {"code": authenticator_code(secret)})
    assert response.status_code == 302
    assert int(client.session["_auth_user_id"]) == staff_user.pk
    assert client.get(reverse("admin:index")).status_code == 200


def test_a_code_typed_as_its_window_ended_is_still_accepted_but_not_an_older_one(
    client, staff_user, password, monkeypatch
):
    # A code read off the phone in the last second of its 30 s window reaches the server in the next
    # one; one step of drift is allowed (RFC 6238 section 5.2), two are not. The server's clock is set
    # to that moment: read off the real clock, the test failed whenever a window ended between its
    # reading and the server's (once in CI).
    secret = generate_totp_secret()
    TOTP.activate(staff_user, secret)
    typed_at = (int(time.time()) // 30) * 30 + 29.5  # the last second of a window
    monkeypatch.setattr(totp_auth, "time", SimpleNamespace(time=lambda: typed_at + 1))  # arrives in the next
    typed = int(typed_at) // 30

    client.post(reverse("account_login"), {"login": staff_user.email, "password": password})
    client.post(reverse("mfa_authenticate"), {"code": format_hotp_value(hotp_value(secret, typed - 1))})
    assert "_auth_user_id" not in client.session

    response = client.post(reverse("mfa_authenticate"), {"code": format_hotp_value(hotp_value(secret, typed))})
    assert response.status_code == 302
    assert int(client.session["_auth_user_id"]) == staff_user.pk


def test_the_secret_shown_is_kept_across_sign_ins_until_it_is_activated(staff_user, password):
    """One QR code, scanned in one session, still works in the next: the secret pending activation belongs
    to the account, not to the browser session that first showed it."""
    first, second = Client(), Client()
    first.post(reverse("account_login"), {"login": staff_user.email, "password": password})
    scanned = first.get(reverse("mfa_activate_totp"), **PAGE_REQUEST).context["form"].secret
    first.post(reverse("account_logout"))

    # A sign-in elsewhere (another browser, or after the first session ended) shows the same secret,
    second.post(reverse("account_login"), {"login": staff_user.email, "password": password})
    page = second.get(reverse("mfa_activate_totp"), **PAGE_REQUEST)
    assert page.context["form"].secret == scanned
    assert scanned in page.context["totp_url"]  # the QR code encodes it too

    # and a code from the authenticator that scanned it activates it there.
    response = second.post(reverse("mfa_activate_totp"), {"code": authenticator_code(scanned)})
    assert response.status_code == 302
    [authenticator] = Authenticator.objects.filter(user=staff_user, type=Authenticator.Type.TOTP)
    assert decrypt(authenticator.data["secret"]) == scanned
    assert second.get(reverse("admin:index"), **PAGE_REQUEST).status_code == 200

    # Once activated it is no longer pending: enrolling again after removing it draws a new secret.
    authenticator.delete()
    third = Client()
    third.post(reverse("account_login"), {"login": staff_user.email, "password": password})
    assert third.get(reverse("mfa_activate_totp"), **PAGE_REQUEST).context["form"].secret != scanned
