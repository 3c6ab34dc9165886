"""What `suspend_user` sets off once it commits, in-process (tests/chat/test_suspension_live.py follows
the same through a real Daphne): a stop for each answer being written for the user, and one event to
their WebSocket group carrying the refusal. Nothing for anyone else, nothing if it rolls back."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from accounts.services import suspend_user
from chat.generation import streams as streams_module
from chat.generation.notify import user_group
from chat.generation.streams import RedisStreams
from chat.models import Message
from chat.suspension import ACCOUNT_REFUSED
from tests.chat.factories import conversation_for, say

pytestmark = pytest.mark.django_db(transaction=True)

REASON = "Reselling answers"
SENTINEL = {"type": "test.sentinel"}


@pytest.fixture(autouse=True)
def _fresh_streams(monkeypatch):
    """The process's stream store is made on the loop that first uses it; each test here runs its own loop."""
    monkeypatch.setattr(streams_module, "_streams", None)
    yield
    store = RedisStreams(settings.REDIS_URL)
    asyncio.run(_flush(store))


async def _flush(store: RedisStreams) -> None:
    await store.redis.flushdb()
    await store.redis.aclose()


def _answers(user) -> dict[str, Message]:
    conversation = conversation_for(user)
    question = say(conversation, "user", "Tell me everything.")
    return {
        status: say(conversation, "assistant", "", parent=question, status=status)
        for status in (
            Message.Status.PENDING,
            Message.Status.STREAMING,
            Message.Status.COMPLETED,
            Message.Status.STOPPED,
        )
    }


async def _stops_requested(message_ids: list[int]) -> list[bool]:
    store = RedisStreams(settings.REDIS_URL)
    try:
        return [await store.stop_requested(message_id) for message_id in message_ids]
    finally:
        await store.redis.aclose()


async def _listening(*user_ids: int) -> tuple:
    layer = get_channel_layer()
    channels = []
    for user_id in user_ids:
        channel = await layer.new_channel()
        await layer.group_add(user_group(user_id), channel)
        channels.append(channel)
    return layer, channels


async def _first_event(layer, user_id: int, channel: str) -> dict:
    """The first event the channel got: a sentinel sent after the action comes first if nothing else came."""
    await layer.group_send(user_group(user_id), SENTINEL)
    return await asyncio.wait_for(layer.receive(channel), 10)


def test_suspending_stops_each_running_answer_of_theirs_and_tells_their_sockets(user, other_user):
    theirs, others = _answers(user), _answers(other_user)

    async def scenario():
        layer, (channel, other_channel) = await _listening(user.pk, other_user.pk)
        await asyncio.to_thread(suspend_user, user, REASON)
        return await _first_event(layer, user.pk, channel), await _first_event(layer, other_user.pk, other_channel)

    event, others_event = asyncio.run(scenario())

    assert event["type"] == ACCOUNT_REFUSED
    assert event["refusal"]["code"] == "account_suspended" and event["refusal"]["status"] == 403
    assert REASON in event["refusal"]["message"]
    assert others_event == SENTINEL
    stops = asyncio.run(_stops_requested([m.pk for m in (*theirs.values(), *others.values())]))
    # Only their answers still being written: pending and streaming, not finished ones, not anyone else's.
    assert stops == [True, True, False, False, False, False, False, False]


def test_nothing_is_stopped_or_told_when_the_suspension_rolls_back(user):
    answers = _answers(user)

    def suspend_then_fail():
        with pytest.raises(RuntimeError), transaction.atomic():
            suspend_user(user, REASON)
            raise RuntimeError("the admin action failed after suspending")

    async def scenario():
        layer, (channel,) = await _listening(user.pk)
        await asyncio.to_thread(suspend_then_fail)
        return await _first_event(layer, user.pk, channel)

    assert asyncio.run(scenario()) == SENTINEL
    assert asyncio.run(_stops_requested([m.pk for m in answers.values()])) == [False] * 4
    user.refresh_from_db()
    assert not user.is_suspended
