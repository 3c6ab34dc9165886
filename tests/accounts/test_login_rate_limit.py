from django.urls import reverse


def test_sixth_bad_password_in_a_minute_is_locked_out(client, user, password):
    for _ in range(5):
        response = client.post(reverse("account_login"), {"login": user.email, "password": "wrong-password"})
        assert response.status_code == 200
        assert "not correct" in response.content.decode()

    response = client.post(reverse("account_login"), {"login": user.email, "password": "wrong-password"})
    assert "Too many failed login attempts" in response.content.decode()

    # Even the right password is refused while the lockout lasts.
    response = client.post(reverse("account_login"), {"login": user.email, "password": password})
    assert "Too many failed login attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_flood_of_sign_in_requests_from_one_address_gets_429(client, db, settings):
    settings.ACCOUNT_RATE_LIMITS = {**settings.ACCOUNT_RATE_LIMITS, "login": "3/m/ip"}
    statuses = [
        client.post(reverse("account_login"), {"login": f"n{i}@example.com", "password": "x"}).status_code
        for i in range(4)
    ]
    assert statuses[:3] == [200, 200, 200]
    assert statuses[3] == 429


def test_a_flood_of_signups_from_one_address_gets_429(client, db, settings, password):
    settings.ACCOUNT_RATE_LIMITS = {**settings.ACCOUNT_RATE_LIMITS, "signup": "2/m/ip"}
    statuses = []
    for i in range(3):
        response = client.post(
            reverse("account_signup"), {"email": f"s{i}@example.com", "password1": password, "password2": password}
        )
        statuses.append(response.status_code)
        client.logout()
    assert statuses[:2] == [302, 302]
    assert statuses[2] == 429
