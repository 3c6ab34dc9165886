"""One answer's frames for a reader: what SSE and the WebSocket both deliver.

A reader gets every frame after the id it names, replayed from the answer's token stream and then
live, until the "done" frame. A finished answer whose stream has expired is served from the
database instead (as one delta and a done frame), and so is one whose stream vanished while the
reader waited (checked at every keepalive), so no reader waits forever on an answer that ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from channels.db import database_sync_to_async
from redis.exceptions import ConnectionError as RedisConnectionError

from chat.generation.streams import DELTA, DONE, KEEPALIVE, Frame, get_streams
from chat.models import Message
from chat.serializers import message_json

# Ids for answers replayed from the database after their token stream expired.
SAVED_DELTA_ID = "0-1"
SAVED_DONE_ID = "0-2"
#: Tries again of a stream read that failed for want of a Redis connection, before giving up.
FOLLOW_RETRIES = 4

log = logging.getLogger(__name__)


def _saved(message: Message, after: str | None) -> list[Frame]:
    frames = []
    if after is None and message.content:
        frames.append(Frame(id=SAVED_DELTA_ID, kind=DELTA, data={"text": message.content}))
    frames.append(Frame(id=SAVED_DONE_ID, kind=DONE, data={"message": message_json(message)}))
    return frames


def _saved_now(message_id: int, after: str | None) -> list[Frame] | None:
    """The saved frames of a finished answer; [] while it is still running; None when it is gone."""
    message = Message.objects.filter(pk=message_id).first()
    if message is None:
        return None
    return [] if message.is_active else _saved(message, after)


async def follow_answer(message: Message, after: str | None = None) -> AsyncIterator[Frame]:
    """The frames of `message` (an answer) after `after`, with KEEPALIVE frames while nothing happens.

    A read that fails because Redis has no connection to spare (a saturated process) is tried again
    from the last frame delivered, a few times with a pause, before the failure reaches the reader.
    """
    streams = get_streams()
    if not message.is_active and not await streams.exists(message.pk):
        for frame in await database_sync_to_async(_saved)(message, after):
            yield frame
        return
    failures = 0
    while True:
        try:
            async for frame in streams.follow(message.pk, after):
                if frame.kind != KEEPALIVE:
                    after, failures = frame.id, 0
                yield frame
                if frame.kind == KEEPALIVE and not await streams.exists(message.pk):
                    saved = await database_sync_to_async(_saved_now)(message.pk, after)
                    if saved is None:  # deleted with its conversation
                        return
                    if saved:
                        for saved_frame in saved:
                            yield saved_frame
                        return
            return
        except RedisConnectionError:
            failures += 1
            if failures > FOLLOW_RETRIES:
                raise
            log.warning("reading the stream of message %s failed (try %d); retrying", message.pk, failures)
            await asyncio.sleep(0.2 * 2**failures)
