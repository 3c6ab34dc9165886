"""Server-Sent Events for one answer: replay what was written, then follow it live."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async

from chat.models import Message
from chat.serializers import message_json
from chat.streams import DELTA, DONE, KEEPALIVE, get_streams

# Ids for answers replayed from the database after their token stream expired.
SAVED_DELTA_ID = "0-1"
SAVED_DONE_ID = "0-2"


def event(kind: str, data: dict, frame_id: str | None = None) -> str:
    head = f"id: {frame_id}\n" if frame_id else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data)}\n\n"


async def _saved(message: Message, after: str | None) -> AsyncIterator[str]:
    if after is None and message.content:
        yield event(DELTA, {"text": message.content}, SAVED_DELTA_ID)
    yield event(DONE, {"message": await sync_to_async(message_json)(message)}, SAVED_DONE_ID)


def _reload(message_id: int) -> Message | None:
    return Message.objects.filter(pk=message_id).first()


async def answer_events(message: Message, after: str | None) -> AsyncIterator[str]:
    streams = get_streams()
    if not message.is_active and not await streams.exists(message.pk):
        async for chunk in _saved(message, after):
            yield chunk
        return
    async for frame in streams.follow(message.pk, after):
        if frame.kind == KEEPALIVE:
            yield ": keepalive\n\n"
            # A stream that vanished under a finished message (expired, or never written) is
            # answered from the database instead of waiting forever.
            if not await streams.exists(message.pk):
                current = await sync_to_async(_reload)(message.pk)
                if current is None:  # deleted with its conversation
                    return
                if not current.is_active:
                    async for chunk in _saved(current, after):
                        yield chunk
                    return
            continue
        yield event(frame.kind, frame.data, frame.id)
