"""Server-Sent Events for one answer: its frames as `text/event-stream`, with keepalive comments."""

from __future__ import annotations

from collections.abc import AsyncIterator

from chat.generation.follow import follow_answer
from chat.generation.streams import KEEPALIVE
from chat.models import Message
from config.wire import json_bytes

#: An answer's stream is not cached, and proxies (nginx) pass each frame on at once.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(kind: str, data: dict, frame_id: str | None = None) -> bytes:
    head = f"id: {frame_id}\nevent: {kind}\ndata: " if frame_id else f"event: {kind}\ndata: "
    return head.encode() + json_bytes(data) + b"\n\n"


async def answer_events(message: Message, after: str | None) -> AsyncIterator[bytes]:
    async for frame in follow_answer(message, after):
        yield b": keepalive\n\n" if frame.kind == KEEPALIVE else event(frame.kind, frame.data, frame.id)
