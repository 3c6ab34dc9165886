import pytest
from django.urls import reverse

from accounts.services import reinstate_user, suspend_user


def test_a_suspended_user_cannot_sign_in_and_is_told_why(client, user, password):
    suspend_user(user, "Sending spam to other users")

    response = client.post(reverse("account_login"), {"login": user.email, "password": password})

    assert response.status_code == 403
    assert "Sending spam to other users" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_an_open_session_is_shown_the_reason_on_every_page_and_can_sign_out(client, user):
    client.force_login(user)
    assert client.get(reverse("home")).status_code == 200

    suspend_user(user, "Chargeback under review")
    for url in (reverse("home"), reverse("billing:usage"), reverse("account_api_keys")):
        response = client.get(url)
        assert response.status_code == 403
        assert response.templates[0].name == "accounts/suspended.html"
        assert "Chargeback under review" in response.content.decode()
    # Not signed out behind their back (the next page would only say "Sign in"): they sign out themselves.
    assert int(client.session["_auth_user_id"]) == user.pk
    assert reverse("account_logout") in response.content.decode()

    client.post(reverse("account_logout"))
    assert "_auth_user_id" not in client.session
    assert client.get(reverse("home")).templates[0].name == "landing.html"


def test_the_chat_json_endpoints_answer_a_suspended_session_with_json_not_a_page(client, user):
    client.force_login(user)
    suspend_user(user, "Chargeback under review")

    response = client.get(reverse("chat:conversations"))

    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "account_suspended"
    assert error["message"] == "Your account has been suspended by our staff. Reason: Chargeback under review."


def test_a_reinstated_user_can_sign_in_again(client, user, password):
    suspend_user(user, "Mistake")
    reinstate_user(user)

    response = client.post(reverse("account_login"), {"login": user.email, "password": password})

    assert response.status_code == 302
    assert int(client.session["_auth_user_id"]) == user.pk


def test_reinstatement_ends_every_session_from_before_the_suspension(client, user, password):
    client.force_login(user)
    suspend_user(user, "Chargeback under review")
    assert client.get(reverse("home")).status_code == 403  # still signed in, to read why

    reinstate_user(user)

    # The old session does not come back with the account: it was ended, and they sign in again.
    assert client.get(reverse("home")).templates[0].name == "landing.html"
    assert "_auth_user_id" not in client.session
    response = client.post(reverse("account_login"), {"login": user.email, "password": password})
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 200
    assert int(client.session["_auth_user_id"]) == user.pk


def test_reinstating_someone_who_was_not_suspended_signs_no_one_out(client, user):
    client.force_login(user)
    reinstate_user(user)
    assert client.get(reverse("home")).status_code == 200
    assert int(client.session["_auth_user_id"]) == user.pk


def test_suspending_needs_a_reason(user):
    with pytest.raises(ValueError, match="reason"):
        suspend_user(user, "   ")
    user.refresh_from_db()
    assert not user.is_suspended


@pytest.fixture
def staff_admin(db):
    from tests.support.accounts import make_staff, signed_in

    return signed_in(make_staff("moderator@example.com", is_superuser=True))


def test_staff_suspend_from_the_admin_with_a_reason_and_the_user_is_shown_that_reason(staff_admin, client, user):
    from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

    changelist = reverse("admin:accounts_user_changelist")
    asked = staff_admin.post(changelist, {"action": "suspend", ACTION_CHECKBOX_NAME: [user.pk]})
    assert asked.status_code == 200 and 'name="reason"' in asked.content.decode()
    refused = staff_admin.post(
        changelist, {"action": "suspend", ACTION_CHECKBOX_NAME: [user.pk], "apply": "1", "reason": "  "}
    )
    assert "Give a reason" in refused.content.decode()
    user.refresh_from_db()
    assert not user.is_suspended

    staff_admin.post(
        changelist,
        {
            "action": "suspend",
            ACTION_CHECKBOX_NAME: [user.pk],
            "apply": "1",
            "reason": "Sharing an account with 40 people",
        },
    )
    user.refresh_from_db()
    assert user.is_suspended and user.suspended_at is not None

    client.force_login(user)
    assert "Sharing an account with 40 people" in client.get(reverse("home")).content.decode()


def test_suspending_from_a_users_page_needs_a_reason_and_stamps_the_time(staff_admin, user):
    suspend = reverse("admin:accounts_user_suspend", args=[user.pk])
    assert (
        reverse("admin:accounts_user_suspend", args=[user.pk])
        in staff_admin.get(reverse("admin:accounts_user_change", args=[user.pk])).content.decode()
    )

    refused = staff_admin.post(suspend, {"apply": "1", "reason": ""})
    assert refused.status_code == 200 and "Give a reason" in refused.content.decode()
    user.refresh_from_db()
    assert not user.is_suspended

    staff_admin.post(suspend, {"apply": "1", "reason": "Abuse report #1234"})
    user.refresh_from_db()
    assert user.is_suspended and user.suspended_reason == "Abuse report #1234" and user.suspended_at is not None

    reinstate = reverse("admin:accounts_user_reinstate", args=[user.pk])
    staff_admin.post(reinstate, {"apply": "1", "reason": "Appeal accepted"})
    user.refresh_from_db()
    assert not user.is_suspended and user.suspended_at is None and user.suspended_reason == ""


def test_the_user_form_cannot_tick_suspended_past_the_reason_page(staff_admin, user):
    """Suspension has one way in (a reason, the service, the audit log): the form shows it, read-only."""
    change = reverse("admin:accounts_user_change", args=[user.pk])
    form = {
        "email": user.email,
        "display_name": "",
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "10:00:00",
        "is_suspended": "on",
        "suspended_reason": "typed in the form",
    }

    staff_admin.post(change, form)

    user.refresh_from_db()
    assert not user.is_suspended and user.suspended_reason == ""
