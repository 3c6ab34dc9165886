"""A runner under pressure: a Redis pool that is briefly exhausted (every connection busy while the
event loop is saturated) must not fail an answer the engine is producing, nor leave it unfinished."""

from __future__ import annotations

import kombu.exceptions
import pytest
import redis.exceptions
from channels.db import database_sync_to_async

from billing.models import UsageRecord
from chat.generation import admission, run
from chat.generation import answer as saved_answer
from chat.generation.follow import follow_answer
from chat.generation.start import start_turn
from chat.generation.streams import DONE, get_streams
from chat.models import Message
from moderation.services import OutputScreen
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db(transaction=True)

NO_CONNECTION = "No connection available."  # what redis-py's blocking pool raises after its timeout


async def test_an_exhausted_redis_pool_mid_answer_does_not_fail_it(engine, user, settings, monkeypatch):
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(start_turn)(user, content="Tell me about rivers, at length.")
    streams = get_streams()
    real_append = streams.append
    left = {"append": 2}

    async def flaky_append(*args, **kwargs):
        if left["append"]:
            left["append"] -= 1
            raise redis.exceptions.ConnectionError(NO_CONNECTION)
        return await real_append(*args, **kwargs)

    async def release_fails(*args, **kwargs):
        raise redis.exceptions.ConnectionError(NO_CONNECTION)

    monkeypatch.setattr(streams, "append", flaky_append)
    monkeypatch.setattr(admission, "release", release_fails)

    await run.run(saved_answer.generation_for(turn))

    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)
    assert left["append"] == 0  # both failures happened
    assert answer.status == Message.Status.COMPLETED, answer.error
    frames = await streams.read(answer.pk)
    assert frames[-1].kind == DONE
    # Readers rebuild the text from the deltas: nothing lost, nothing twice.
    assert "".join(f.data["text"] for f in frames if f.kind == "delta") == answer.content
    assert await database_sync_to_async(UsageRecord.objects.filter(generation_id=str(answer.pk)).count)() == 1


async def test_a_reader_whose_stream_read_fails_for_want_of_a_connection_goes_on(engine, user, settings, monkeypatch):
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(start_turn)(user, content="A few words, please.")
    await run.run(saved_answer.generation_for(turn))
    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)

    streams = get_streams()
    real_read = streams.read
    left = {"read": 1}

    async def flaky_read(*args, **kwargs):
        if left["read"]:
            left["read"] -= 1
            raise redis.exceptions.ConnectionError(NO_CONNECTION)
        return await real_read(*args, **kwargs)

    monkeypatch.setattr(streams, "read", flaky_read)
    frames = [frame async for frame in follow_answer(answer)]
    assert left["read"] == 0
    assert frames[-1].kind == DONE
    assert "".join(f.data["text"] for f in frames if f.kind == "delta") == answer.content


async def test_an_answer_whose_title_cannot_be_queued_still_ends_well(engine, user, settings, monkeypatch, caplog):
    """Queuing the title is after-work: the broker (or, run eagerly, the database) failing it is logged,
    and the rest of the answer's ending (its moderation flags) still happens."""
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(start_turn)(user, content="A few words, please.")
    screened = []

    def broker_down(*args, **kwargs):
        raise kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    real_record_flags = OutputScreen.finish

    async def record_flags(*args, **kwargs):
        screened.append(True)
        return await real_record_flags(*args, **kwargs)

    monkeypatch.setattr(saved_answer.after_answer, "delay", broker_down)
    monkeypatch.setattr(OutputScreen, "finish", record_flags)

    await run.run(saved_answer.generation_for(turn))

    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)
    assert answer.status == Message.Status.COMPLETED, answer.error
    assert screened == [True]
    assert f"could not queue the follow-up of conversation {turn.conversation.pk}" in caplog.text
