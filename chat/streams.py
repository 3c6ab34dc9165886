"""Per-message token streams, stop flags and heartbeats.

A generation appends frames ("delta", then one "done") to its message's stream; any number of
readers (SSE responses, WebSocket consumers, in any process) replay it from any point and then
follow it live. Each frame has an id, so a reader that reconnects with the last id it saw misses
nothing and sees nothing twice.

Two implementations behind one interface:
- `RedisStreams` (whenever REDIS_URL is set): Redis Streams (XADD/XRANGE/XREAD), a key with a TTL
  for heartbeats, a key plus a pub/sub message for stop commands, so they reach the runner on any
  process.
- `LocalStreams` (the embedded default, one process): the same in memory.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from django.conf import settings

#: How long a finished stream stays readable (a reload within this window replays from Redis;
#: after it, readers get the saved message from the database instead).
FINISHED_TTL_SECONDS = 3600


def heartbeat_ttl() -> int:
    """A generation that has not beaten for this long is considered dead (see chat.reaper)."""
    return settings.CHAT_HEARTBEAT_TTL_SECONDS

DELTA = "delta"
DONE = "done"
KEEPALIVE = "keepalive"  # never stored: made by follow() while waiting


@dataclass(frozen=True)
class Frame:
    id: str
    kind: str
    data: dict = field(default_factory=dict)


class TokenStreams(ABC):
    """The interface. All methods are coroutines so every transport can await them."""

    @abstractmethod
    async def append(self, message_id: int, kind: str, data: dict) -> str:
        ...

    @abstractmethod
    async def read(self, message_id: int, after: str | None = None, *, block_ms: int = 0) -> list[Frame]:
        """Frames after `after` (from the start when None); waits up to `block_ms` if none yet."""
        ...

    @abstractmethod
    async def finish(self, message_id: int, ttl: int = FINISHED_TTL_SECONDS) -> None:
        ...

    @abstractmethod
    async def beat(self, message_id: int, ttl: int | None = None) -> None:
        ...

    @abstractmethod
    async def alive(self, message_ids: list[int]) -> set[int]:
        """Which of these generations have a live heartbeat."""
        ...

    @abstractmethod
    async def request_stop(self, message_id: int) -> None:
        ...

    @abstractmethod
    async def stop_requested(self, message_id: int) -> bool:
        ...

    @abstractmethod
    async def stop_commands(self) -> AsyncIterator[int]:
        """Message ids whose stop was requested, as they arrive (one listener per process)."""
        yield 0  # pragma: no cover  (an async generator, for type checkers)

    async def follow(self, message_id: int, after: str | None = None, *,
                     block_ms: int = 15000) -> AsyncIterator[Frame]:
        """Every frame after `after`, live, until the "done" frame (included).

        Yields a KEEPALIVE frame (empty id) each time `block_ms` passes with nothing new, so the
        transport can send a keepalive and check whether the message ended some other way.
        """
        cursor = after
        while True:
            frames = await self.read(message_id, cursor, block_ms=block_ms)
            if not frames:
                yield Frame(id="", kind=KEEPALIVE)
                continue
            for frame in frames:
                yield frame
                if frame.kind == DONE:
                    return
            cursor = frames[-1].id

    @abstractmethod
    async def exists(self, message_id: int) -> bool:
        ...


def _stream_key(message_id: int) -> str:
    return f"chat:tok:{message_id}"


def _beat_key(message_id: int) -> str:
    return f"chat:hb:{message_id}"


def _stop_key(message_id: int) -> str:
    return f"chat:stop:{message_id}"


STOP_CHANNEL = "chat:stop"


class RedisStreams(TokenStreams):
    def __init__(self, url: str):
        self.url = url
        # redis.asyncio clients belong to one event loop; Celery tasks and tests run several.
        self._clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @property
    def redis(self):
        import redis.asyncio as aioredis

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = aioredis.Redis.from_url(self.url, decode_responses=True)
            self._clients[loop] = client
        return client

    async def append(self, message_id: int, kind: str, data: dict) -> str:
        return await self.redis.xadd(_stream_key(message_id), {"k": kind, "d": json.dumps(data)})

    async def read(self, message_id: int, after: str | None = None, *, block_ms: int = 0) -> list[Frame]:
        key = _stream_key(message_id)
        if block_ms:
            reply = await self.redis.xread({key: after or "0-0"}, block=block_ms)
            entries = reply[0][1] if reply else []
        else:
            entries = await self.redis.xrange(key, min=f"({after}" if after else "-")
        return [Frame(id=entry_id, kind=f["k"], data=json.loads(f["d"])) for entry_id, f in entries]

    async def exists(self, message_id: int) -> bool:
        return bool(await self.redis.exists(_stream_key(message_id)))

    async def finish(self, message_id: int, ttl: int = FINISHED_TTL_SECONDS) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.expire(_stream_key(message_id), ttl)
            pipe.delete(_beat_key(message_id), _stop_key(message_id))
            await pipe.execute()

    async def beat(self, message_id: int, ttl: int | None = None) -> None:
        await self.redis.set(_beat_key(message_id), int(time.time()), ex=ttl or heartbeat_ttl())

    async def alive(self, message_ids: list[int]) -> set[int]:
        if not message_ids:
            return set()
        values = await self.redis.mget([_beat_key(mid) for mid in message_ids])
        return {mid for mid, value in zip(message_ids, values, strict=True) if value is not None}

    async def request_stop(self, message_id: int) -> None:
        # The flag covers a runner that starts (or checks) after the broadcast went out.
        await self.redis.set(_stop_key(message_id), 1, ex=FINISHED_TTL_SECONDS)
        await self.redis.publish(STOP_CHANNEL, str(message_id))

    async def stop_requested(self, message_id: int) -> bool:
        return bool(await self.redis.exists(_stop_key(message_id)))

    async def stop_commands(self) -> AsyncIterator[int]:
        pubsub = self.redis.pubsub()
        await pubsub.subscribe(STOP_CHANNEL)
        try:
            async for item in pubsub.listen():
                if item.get("type") == "message":
                    yield int(item["data"])
        finally:
            await pubsub.aclose()


class LocalStreams(TokenStreams):
    """In-memory streams for the single-process embedded default."""

    def __init__(self):
        self._frames: dict[int, list[Frame]] = {}
        self._expires: dict[int, float] = {}
        self._waiters: dict[int, asyncio.Event] = {}
        self._beats: dict[int, float] = {}
        self._stops: set[int] = set()
        self._stop_queues: list[asyncio.Queue] = []
        self._seq = 0

    def _purge(self) -> None:
        now = time.monotonic()
        for mid in [mid for mid, deadline in self._expires.items() if deadline < now]:
            self._frames.pop(mid, None)
            self._expires.pop(mid, None)

    async def append(self, message_id: int, kind: str, data: dict) -> str:
        self._seq += 1
        frame = Frame(id=f"0-{self._seq}", kind=kind, data=data)
        self._frames.setdefault(message_id, []).append(frame)
        waiter = self._waiters.pop(message_id, None)
        if waiter is not None:
            waiter.set()
        return frame.id

    def _after(self, message_id: int, after: str | None) -> list[Frame]:
        frames = self._frames.get(message_id, [])
        if after is None:
            return list(frames)
        floor = _seq_of(after)
        return [f for f in frames if _seq_of(f.id) > floor]

    async def read(self, message_id: int, after: str | None = None, *, block_ms: int = 0) -> list[Frame]:
        self._purge()
        frames = self._after(message_id, after)
        if frames or not block_ms:
            return frames
        waiter = self._waiters.setdefault(message_id, asyncio.Event())
        try:
            await asyncio.wait_for(waiter.wait(), block_ms / 1000)
        except TimeoutError:
            return []
        return self._after(message_id, after)

    async def exists(self, message_id: int) -> bool:
        self._purge()
        return message_id in self._frames

    async def finish(self, message_id: int, ttl: int = FINISHED_TTL_SECONDS) -> None:
        self._expires[message_id] = time.monotonic() + ttl
        self._beats.pop(message_id, None)
        self._stops.discard(message_id)

    async def beat(self, message_id: int, ttl: int | None = None) -> None:
        self._beats[message_id] = time.monotonic() + (ttl or heartbeat_ttl())

    async def alive(self, message_ids: list[int]) -> set[int]:
        now = time.monotonic()
        return {mid for mid in message_ids if self._beats.get(mid, 0) > now}

    async def request_stop(self, message_id: int) -> None:
        self._stops.add(message_id)
        for queue in self._stop_queues:
            queue.put_nowait(message_id)

    async def stop_requested(self, message_id: int) -> bool:
        return message_id in self._stops

    async def stop_commands(self) -> AsyncIterator[int]:
        queue: asyncio.Queue = asyncio.Queue()
        self._stop_queues.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._stop_queues.remove(queue)


FRAME_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


def is_frame_id(value: str) -> bool:
    """Whether a client-supplied resume point (Last-Event-ID) is a well-formed frame id."""
    return bool(FRAME_ID.match(value))


def _seq_of(frame_id: str) -> int:
    try:
        return int(frame_id.rsplit("-", 1)[-1])
    except ValueError:
        return -1


_streams: TokenStreams | None = None


def get_streams() -> TokenStreams:
    """The process's token-stream store, chosen by settings (Redis when REDIS_URL is set)."""
    global _streams
    if _streams is None:
        _streams = RedisStreams(settings.REDIS_URL) if settings.REDIS_URL else LocalStreams()
    return _streams
