"""Sessions: a new key at sign-in (no fixation), gone at sign-out, and ended elsewhere by a password change."""

from __future__ import annotations

from django.conf import settings
from django.test import Client

from tests.conftest import PASSWORD
from tests.security.authz_world import build_world

NEW_PASSWORD = "a-brand-new-long-passphrase-42"


def _sign_in(client: Client, email: str) -> None:
    response = client.post("/accounts/login/", {"login": email, "password": PASSWORD})
    assert response.status_code == 302, response.content[:300]


def _signed_in(client: Client) -> bool:
    return client.get("/chat/api/models").status_code == 200


def test_signing_in_gives_a_new_session_key(db):
    world = build_world()
    client = Client()
    client.get("/accounts/login/")  # an anonymous session a fixation attack would plant
    client.session.save()
    planted = client.cookies[settings.SESSION_COOKIE_NAME].value
    _sign_in(client, world.owner.email)
    assert client.cookies[settings.SESSION_COOKIE_NAME].value != planted
    assert _signed_in(client)
    # The planted key signs nobody in.
    thief = Client()
    thief.cookies[settings.SESSION_COOKIE_NAME] = planted
    assert not _signed_in(thief)


def test_signing_out_ends_the_session_for_whoever_holds_its_key(db):
    world = build_world()
    client = Client()
    _sign_in(client, world.owner.email)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert client.post("/accounts/logout/").status_code == 302
    copy = Client()
    copy.cookies[settings.SESSION_COOKIE_NAME] = key
    assert not _signed_in(copy)


def test_a_password_change_ends_every_other_session_and_keeps_this_one(db):
    world = build_world()
    here, elsewhere = Client(), Client()
    _sign_in(here, world.owner.email)
    _sign_in(elsewhere, world.owner.email)
    response = here.post(
        "/accounts/password/change/",
        {"oldpassword": PASSWORD, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 302, response.content[:500]
    assert _signed_in(here)
    assert not _signed_in(elsewhere)
