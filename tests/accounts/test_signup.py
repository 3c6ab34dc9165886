import re

from django.core import mail
from django.urls import reverse

from accounts.models import User


def confirmation_link(message) -> str:
    match = re.search(r"https?://[^/\s]+(/accounts/confirm-email/[^\s]+/)", message.body)
    assert match, f"no confirmation link in: {message.body}"
    return match.group(1)


def test_signup_then_verify_then_sign_in(client, db, password):
    # Given a new visitor who signs up
    response = client.post(
        reverse("account_signup"),
        {"email": "Newcomer@Example.com", "password1": password, "password2": password},
    )
    # Then they are asked to verify their email, and one message (sent by the Celery task) says how
    assert response.status_code == 302
    assert response.url == reverse("account_email_verification_sent")
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["newcomer@example.com"]  # allauth stores emails lower-cased
    user = User.objects.get(email__iexact="newcomer@example.com")
    assert not user.emailaddress_set.get().verified

    # When they try to sign in before verifying, they are held at the verification page
    client.logout()
    response = client.post(reverse("account_login"), {"login": "newcomer@example.com", "password": password})
    assert response.status_code == 302 and response.url == reverse("account_email_verification_sent")
    assert "_auth_user_id" not in client.session

    # When they follow the link and confirm
    link = confirmation_link(mail.outbox[-1])
    assert client.get(link).status_code == 200
    response = client.post(link)
    assert response.status_code == 302
    assert user.emailaddress_set.get().verified

    # Then they can sign in with their password and reach the home page
    client.logout()
    response = client.post(reverse("account_login"), {"login": "newcomer@example.com", "password": password})
    assert response.status_code == 302
    assert int(client.session["_auth_user_id"]) == user.pk
    assert client.get(reverse("home")).status_code == 200


def test_signup_with_a_registered_email_makes_no_second_account_and_tells_the_owner(client, user, password):
    # allauth does not reveal which emails are registered: the page is the same as for a new
    # address, and the owner is emailed instead.
    response = client.post(
        reverse("account_signup"), {"email": user.email.upper(), "password1": password, "password2": password}
    )
    assert response.status_code == 302
    assert User.objects.count() == 1
    assert len(mail.outbox) == 1 and mail.outbox[0].to == [user.email]
    assert "already" in mail.outbox[0].body


def test_home_page_offers_anonymous_visitors_a_way_to_sign_in(client, db):
    response = client.get(reverse("home"))
    assert response.status_code == 200
    assert f'href="{reverse("account_login")}"' in response.content.decode()


def test_sign_in_page_renders_in_the_product_shell(client, db):
    response = client.get(reverse("account_login"))
    body = response.content.decode()
    assert response.status_code == 200
    assert 'id="theme-toggle"' in body
    assert 'name="login"' in body and 'name="password"' in body
