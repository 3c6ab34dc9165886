"""Accounts for tests beyond `tests.conftest.make_user`: staff with an authenticator enrolled, and a
Django test client signed in as someone."""

from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from django.test import Client

from tests.conftest import make_user


def make_staff(email: str, *, secret: str | None = None, **fields):
    """A staff member with a TOTP authenticator enrolled (the console refuses staff without one):
    `secret` when the test types its codes, a new one otherwise."""
    staff = make_user(email, staff=True, **fields)
    TOTP.activate(staff, secret or generate_totp_secret())
    return staff


def signed_in(user) -> Client:
    """A test client with a session of `user`'s, as after signing in (both factors, for staff)."""
    client = Client()
    client.force_login(user)
    return client
