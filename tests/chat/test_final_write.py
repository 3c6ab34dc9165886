"""An answer's final write and its ledger row go together, exactly once (chat.generation.settle.save_final
over billing.ledger): one statement on PostgreSQL, a transaction of two elsewhere (the embedded SQLite)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import UsageRecord
from billing.quota_store import get_store
from billing.selectors import current_period
from billing.services import reserve_quota
from chat.generation.engine import Usage
from chat.generation.settle import ALREADY_ENDED, COMPLETED, ENDED, GONE, Ending, save_final
from chat.models import Message
from tests.chat.factories import conversation_for, say
from tests.support.plans import put_on_plan

# Committed for real: the usage counter changes only once the ledger row is committed.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["one statement", "a transaction"])
def way(request, monkeypatch):
    """Each test runs on PostgreSQL's one statement and on the portable transaction (SQLite's way)."""
    if request.param == "a transaction":
        monkeypatch.setattr(connection, "vendor", "sqlite")
    return request.param


def _streaming_answer(user):
    conversation = conversation_for(user)
    question = say(conversation, "user", "Tell me about tides.")
    return say(conversation, "assistant", "Tides", parent=question, status=Message.Status.STREAMING)


def _held(user) -> int:
    return get_store().snapshot(user.pk, current_period(user).period.key)[1]


def _ending() -> Ending:
    return Ending(status=COMPLETED, text="Tides rise and fall.", usage=Usage(120, 20, 30), ttft_ms=80)


def test_the_final_write_and_the_ledger_row_are_written_together(user, way):
    put_on_plan(user, "pro")
    answer = _streaming_answer(user)
    reservation = reserve_quota(user, 1_000, model="sim-small")
    period = current_period(user)

    with CaptureQueriesContext(connection) as queries:
        state = save_final(answer, reservation, _ending(), user=user, period=period, node="node-a")

    assert state == ENDED
    saved = Message.objects.get(pk=answer.pk)
    assert (saved.status, saved.content, saved.completion_tokens, saved.node) == (
        COMPLETED,
        "Tides rise and fall.",
        30,
        "node-a",
    )
    row = UsageRecord.objects.get(generation_id=str(answer.pk))
    assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens, row.node) == (120, 20, 30, "node-a")
    assert _held(user) == 0  # the reservation became the real figure
    if way == "one statement":
        assert len(queries) == 1, [q["sql"] for q in queries]


def test_an_answer_someone_else_ended_first_is_neither_written_nor_settled_again(user, way):
    put_on_plan(user, "pro")
    answer = _streaming_answer(user)
    Message.objects.filter(pk=answer.pk).update(status=Message.Status.INTERRUPTED, content="Tides")
    reservation = reserve_quota(user, 1_000, model="sim-small")

    assert save_final(answer, reservation, _ending(), user=user, period=current_period(user)) == ALREADY_ENDED

    assert Message.objects.get(pk=answer.pk).status == Message.Status.INTERRUPTED
    assert not UsageRecord.objects.exists()
    assert _held(user) == 1_000  # whoever ended it settles it, not this call


def test_an_answer_deleted_meanwhile_writes_nothing_and_gives_its_reservation_back(user, way):
    put_on_plan(user, "pro")
    answer = _streaming_answer(user)
    reservation = reserve_quota(user, 1_000, model="sim-small")
    answer.conversation.delete()

    assert save_final(answer, reservation, _ending(), user=user, period=current_period(user)) == GONE

    assert not UsageRecord.objects.exists()
    assert _held(user) == 0


def test_a_generation_settled_already_keeps_its_one_row_and_is_counted_once(user, way):
    put_on_plan(user, "pro")
    answer = _streaming_answer(user)
    reservation = reserve_quota(user, 1_000, model="sim-small")
    save_final(answer, reservation, _ending(), user=user, period=current_period(user))
    used = get_store().snapshot(user.pk, current_period(user).period.key)[0]
    # The same generation ended again (its message made active again by hand: damaged data).
    Message.objects.filter(pk=answer.pk).update(status=Message.Status.STREAMING)

    assert save_final(answer, reservation, _ending(), user=user, period=current_period(user)) == ENDED

    assert UsageRecord.objects.filter(generation_id=str(answer.pk)).count() == 1
    assert get_store().snapshot(user.pk, current_period(user).period.key)[0] == used
