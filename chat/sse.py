"""Server-Sent Events for one answer: its frames as `text/event-stream`, with keepalive comments."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from chat.generation.follow import follow_answer
from chat.generation.streams import KEEPALIVE
from chat.models import Message


def event(kind: str, data: dict, frame_id: str | None = None) -> str:
    head = f"id: {frame_id}\n" if frame_id else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data)}\n\n"


async def answer_events(message: Message, after: str | None) -> AsyncIterator[str]:
    async for frame in follow_answer(message, after):
        yield ": keepalive\n\n" if frame.kind == KEEPALIVE else event(frame.kind, frame.data, frame.id)
