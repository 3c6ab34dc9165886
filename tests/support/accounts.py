"""Accounts for tests beyond `tests.conftest.make_user`: staff with an authenticator enrolled, and a
Django test client signed in as someone."""

import time

from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, generate_totp_secret, hotp_value
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


def authenticator_code(secret: str) -> str:
    """The code an authenticator app shows for `secret` now."""
    return format_hotp_value(hotp_value(secret, int(time.time()) // 30))
