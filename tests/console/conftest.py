"""Staff console fixtures: a superuser, a moderator and a plain user, each with a signed-in client.
Staff have an authenticator enrolled (the console refuses staff without one)."""

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from console.roles import MODERATOR_GROUP
from tests.support.accounts import make_staff, signed_in


@pytest.fixture
def superuser(db):
    return make_staff("root@example.com", is_superuser=True)


@pytest.fixture
def admin_client(superuser) -> Client:
    return signed_in(superuser)


@pytest.fixture
def moderator(db):
    staff = make_staff("mod@example.com")
    staff.groups.add(Group.objects.get(name=MODERATOR_GROUP))
    return staff


@pytest.fixture
def moderator_client(moderator) -> Client:
    return signed_in(moderator)


_records = iter(range(1, 1_000_000))


def usage(user, billable: int, *, prompt: int | None = None, completion: int = 0, plan_slug: str = "free"):
    """One ledger line, as the billing services write it after an answer."""
    from billing.models import UsageRecord

    n = next(_records)
    return UsageRecord.objects.create(
        user=user,
        reservation_id=f"res-{n}",
        generation_id=f"gen-{n}",
        plan_slug=plan_slug,
        model="demo",
        prompt_tokens=billable - completion if prompt is None else prompt,
        completion_tokens=completion,
        billable_tokens=billable,
    )
