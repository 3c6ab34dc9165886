"""Every new chat gets a title, however its first answer ended (issue 25, defect 3): before, only a
completed first answer did, and a chat whose first answer was stopped, blocked or failed stayed
"New chat" for good."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from chat.generation import answer as saved_answer
from chat.generation import run
from chat.generation.start import start_turn
from chat.models import Conversation, Message
from chat.titles import fallback_title
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
