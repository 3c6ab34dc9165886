"""The reaper ends answers whose runner died, one by one: a broken one does not stop the others."""

import pytest
from asgiref.sync import async_to_sync

from billing.models import UsageRecord
from chat.generation.reap import INTERRUPTED_ERROR, reap_stalled
from chat.models import Message
from config.tokens import estimate_tokens
from tests.chat.factories import conversation_for, stalled_answer
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_message_that_cannot_be_settled_does_not_stop_the_reaper(user):
    put_on_plan(user, "pro")
    conversation = conversation_for(user)
    broken = stalled_answer(conversation, "broken half answer", reservation={})  # no reservation stored
    good = stalled_answer(
        conversation,
        "good half answer",
        reservation={
            "id": "r-good",
            "user_id": user.pk,
            "period_key": 0,
            "amount": 100,
            "model": "sim-small",
            "expires_at": 0.0,
        },
    )

    reaped = async_to_sync(reap_stalled)(grace_seconds=0)

    good.refresh_from_db()
    assert good.pk in reaped and good.status == "interrupted" and good.error == INTERRUPTED_ERROR
    assert good.content == "good half answer"
    assert UsageRecord.objects.filter(generation_id=str(good.pk)).count() == 1
    broken.refresh_from_db()
    assert broken.status == "interrupted" and broken.content == "broken half answer"
    assert not UsageRecord.objects.filter(generation_id=str(broken.pk)).exists()  # nothing to settle against


def test_a_continuation_whose_runner_died_is_billed_for_what_it_wrote_after_the_text_it_continued(user):
    put_on_plan(user, "pro")
    continued, written = "Once upon a time, far away, in a lighthouse by the sea,", " there lived a keeper."
    answer = stalled_answer(
        conversation_for(user),
        continued + written,
        reservation={
            "id": "r-continued",
            "user_id": user.pk,
            "period_key": 0,
            "amount": 100,
            "model": "sim-small",
            "expires_at": 0.0,
        },
    )
    Message.objects.filter(pk=answer.pk).update(continued_chars=len(continued))

    assert answer.pk in async_to_sync(reap_stalled)(grace_seconds=0)

    answer.refresh_from_db()
    assert answer.status == "interrupted" and answer.content == continued + written  # kept whole
    row = UsageRecord.objects.get(generation_id=str(answer.pk))
    # No engine can count it (the answer names no node): the estimate, of its own text only.
    assert row.completion_tokens == answer.completion_tokens == estimate_tokens(written)
    assert estimate_tokens(written) < estimate_tokens(continued + written)
