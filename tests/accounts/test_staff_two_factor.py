import time

from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, generate_totp_secret, hotp_value
from django.urls import reverse


def current_code(secret: str) -> str:
    return format_hotp_value(hotp_value(secret, int(time.time()) // 30))


def test_staff_without_an_authenticator_must_set_one_up_first(client, staff_user, password):
    client.post(reverse("account_login"), {"login": staff_user.email, "password": password})

    for url in (reverse("home"), reverse("admin:index")):
        response = client.get(url)
        assert response.status_code == 302
        assert response.url == reverse("mfa_activate_totp")

    # The setup path is open, so they can comply: allauth asks for the password again, then shows
    # the authenticator setup page.
    response = client.get(reverse("mfa_activate_totp"))
    assert response.status_code == 302 and response.url.startswith(reverse("account_reauthenticate"))
    response = client.post(response.url, {"password": password})
    assert response.status_code == 302 and response.url == reverse("mfa_activate_totp")
    response = client.get(reverse("mfa_activate_totp"))
    assert response.status_code == 200
    assert 'name="code"' in response.content.decode()


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

    response = client.post(reverse("mfa_authenticate"), {"code": current_code(secret)})
    assert response.status_code == 302
    assert int(client.session["_auth_user_id"]) == staff_user.pk
    assert client.get(reverse("admin:index")).status_code == 200
