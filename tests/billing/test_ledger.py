"""billing.ledger: the ledger row and the write it closes, together or not at all."""

import pytest
from django.contrib.auth import get_user_model
from django.db import DataError, transaction

from billing.ledger import Closing, write
from billing.models import UsageRecord

pytestmark = pytest.mark.django_db


def _row(user, generation_id: str = "g-1", **fields) -> UsageRecord:
    figures = {"prompt_tokens": 10, "cached_tokens": 0, "completion_tokens": 5, "billable_tokens": 15}
    return UsageRecord(
        user=user,
        reservation_id=f"r-{generation_id}",
        generation_id=generation_id,
        plan_slug="free",
        model="sim-small",
        **(figures | fields),
    )


def test_a_closing_that_changes_a_row_is_written_with_the_ledger_row(free_user):
    users = get_user_model().objects.filter(pk=free_user.pk, display_name="")

    written = write(_row(free_user), Closing(users, {"display_name": "Ada"}))

    assert (written.closed, written.inserted) == (True, True)
    free_user.refresh_from_db()
    assert free_user.display_name == "Ada"
    assert UsageRecord.objects.get(generation_id="g-1").billable_tokens == 15


@pytest.mark.parametrize("matching", ["a filter matching no row", "a filter that cannot match (pk__in=[])"])
def test_a_closing_that_changes_nothing_writes_no_ledger_row(free_user, matching):
    people = get_user_model().objects
    rows = people.filter(pk=free_user.pk, display_name="someone") if "no row" in matching else people.filter(pk__in=[])

    written = write(_row(free_user), Closing(rows, {"display_name": "Ada"}))

    assert (written.closed, written.inserted) == (False, False)
    assert not UsageRecord.objects.exists()


def test_a_value_too_long_for_its_column_is_refused_not_cut_and_nothing_is_written(free_user):
    users = get_user_model().objects.filter(pk=free_user.pk)

    with pytest.raises(DataError), transaction.atomic():
        write(_row(free_user, node="n" * 201), Closing(users, {"display_name": "Ada"}))

    free_user.refresh_from_db()
    assert free_user.display_name == "" and not UsageRecord.objects.exists()


def test_a_second_row_for_a_generation_is_not_written_and_says_so(free_user):
    write(_row(free_user))

    again = write(_row(free_user))

    assert (again.closed, again.inserted) == (True, False)
    assert UsageRecord.objects.count() == 1
