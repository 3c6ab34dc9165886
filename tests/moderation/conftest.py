"""Staff signed in to the admin (with two-factor set up, as the console requires)."""

import pytest

from tests.support.accounts import make_staff, signed_in


@pytest.fixture
def staff(db):
    return make_staff("moderator@example.com", is_superuser=True)


@pytest.fixture
def staff_client(staff):
    return signed_in(staff)


# The console's staff fixtures (a superuser, a moderator), for the queue's actions.
from tests.console.conftest import moderator, moderator_client, superuser  # noqa: E402, F401
