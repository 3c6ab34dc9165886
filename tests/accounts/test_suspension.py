from django.urls import reverse

from accounts.services import reinstate_user, suspend_user


def test_a_suspended_user_cannot_sign_in_and_is_told_why(client, user, password):
    suspend_user(user, "Sending spam to other users")

    response = client.post(reverse("account_login"), {"login": user.email, "password": password})

    assert response.status_code == 403
    assert "Sending spam to other users" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_suspension_ends_an_open_session(client, user):
    client.force_login(user)
    assert client.get(reverse("home")).status_code == 200

    suspend_user(user, "Chargeback under review")
    response = client.get(reverse("home"))

    assert response.status_code == 403
    assert "Chargeback under review" in response.content.decode()
    assert "_auth_user_id" not in client.session  # signed out
    assert client.get(reverse("home")).templates[0].name == "landing.html"


def test_a_reinstated_user_can_sign_in_again(client, user, password):
    suspend_user(user, "Mistake")
    reinstate_user(user)

    response = client.post(reverse("account_login"), {"login": user.email, "password": password})

    assert response.status_code == 302
    assert int(client.session["_auth_user_id"]) == user.pk


def test_suspending_needs_a_reason(user):
    import pytest

    with pytest.raises(ValueError, match="reason"):
        suspend_user(user, "   ")
    user.refresh_from_db()
    assert not user.is_suspended
