"""Every new chat gets a title, however its first answer ended (issue 25, defect 3): before, only a
completed first answer did, and a chat whose first answer was stopped, blocked or failed stayed
"New chat" for good. Then (issue 25, item 3): one whose first answer lost its runner (ended by the
reaper as interrupted) stayed "New chat" too, and one whose first question staff removed was titled
by whatever the model made of an empty question; it is now titled "Removed message", never by the
words that were removed."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from chat.generation import answer as saved_answer
from chat.generation import run
from chat.generation.reap import reap_stalled
from chat.generation.start import start_turn
from chat.models import Conversation, Message
from chat.titles import fallback_title, title_conversation
from moderation.models import Flag
from review.services import hide_message
from tests.support.accounts import make_staff
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "Which lighthouses on the Breton coast can still be visited at night?"


async def _title(conversation_id: int) -> str:
    return (await database_sync_to_async(Conversation.objects.get)(pk=conversation_id)).title


async def test_a_chat_whose_first_answer_was_stopped_gets_a_title(engine, user, settings):
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(start_turn)(user, content=QUESTION)
    generation = saved_answer.generation_for(turn)
    generation.stop.set()  # stopped at once, as the Stop button does

    await run.run(generation)

    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)
    assert answer.status == Message.Status.STOPPED
    assert await _title(turn.conversation.pk)


async def test_a_chat_whose_first_answer_failed_is_titled_from_its_question(engine, user, settings):
    settings.SGLANG_URL = "http://127.0.0.1:9"  # nothing listens: the answer fails, and no model can title it
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(start_turn)(user, content=QUESTION)

    await run.run(saved_answer.generation_for(turn))

    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)
    assert answer.status == Message.Status.FAILED
    assert await _title(turn.conversation.pk) == fallback_title(QUESTION)


async def test_a_chat_whose_first_answer_lost_its_runner_is_titled_from_its_question(engine, user, settings):
    """The runner's process died (a deploy, a crash) before the answer ended: the reaper ends it, and the
    chat is titled as one whose answer failed is (the question's first words)."""
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(start_turn)(user, content=QUESTION)  # saved, and then never run

    assert await reap_stalled(grace_seconds=0) == [turn.assistant_message.pk]

    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)
    assert answer.status == Message.Status.INTERRUPTED
    assert await _title(turn.conversation.pk) == fallback_title(QUESTION)


def _remove(question: Message) -> None:
    """Staff remove the question (the moderation queue's "hide"): blocked, its text only on the flag."""
    flag = Flag.objects.create(
        user=question.conversation.owner, message=question, source=Flag.Source.INPUT, category="Spam", text=QUESTION
    )
    hide_message(flag, make_staff("mod@example.com"))


async def test_a_chat_whose_first_question_staff_removed_gets_a_neutral_title(engine, user, settings):
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(start_turn)(user, content=QUESTION)
    await database_sync_to_async(_remove)(turn.user_message)  # while its answer is being written

    await run.run(saved_answer.generation_for(turn))

    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)
    assert answer.status == Message.Status.COMPLETED
    # Not the removed words, and not what the model made of an empty question.
    assert await _title(turn.conversation.pk) == "Removed message"


def test_the_first_words_of_a_removed_question_never_become_a_title(user):
    conversation = Conversation.objects.create(owner=user, model="sim-small")
    question = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content=QUESTION, status=Message.Status.COMPLETED
    )
    _remove(question)

    assert title_conversation(conversation.pk, ask_model=False) == "Removed message"
    assert Conversation.objects.get(pk=conversation.pk).title == "Removed message"
