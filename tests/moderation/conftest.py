"""Staff signed in to the admin (with two-factor set up, as the console requires)."""

import pytest
from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from django.test import Client

from tests.conftest import make_user


@pytest.fixture
def staff(db):
    staff = make_user("moderator@example.com", staff=True, is_superuser=True)
    TOTP.activate(staff, generate_totp_secret())
    return staff


@pytest.fixture
def staff_client(staff):
    client = Client()
    client.force_login(staff)
    return client


# The console's staff fixtures (a superuser, a moderator), for the queue's actions.
from tests.console.conftest import moderator, moderator_client, superuser  # noqa: E402, F401
