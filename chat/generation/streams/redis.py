"""The token streams whenever REDIS_URL is set: Redis Streams, shared by every process.

Frames are Redis Streams entries (XADD/XRANGE/XREAD) whose ids are the frame ids; a heartbeat is a
key with a TTL; a stop command is a key (the flag) plus a pub/sub message, so it reaches the runner
on any process (the listener subscribes again by itself after losing Redis). Readers do not each
hold a connection blocked in XREAD: one hub per process (per event loop) fans frames out to every
local reader. Frames written by a runner in this process reach its local readers straight from the
runner; one reader loop, on one connection, follows the streams whose runner is in another process.

This module is `chat.generation.streams.redis`; its `import redis` is absolute (Python 3), so it is
the redis-py library, never this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import orjson
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from chat.generation.streams.base import (
    DELTA,
    DONE,
    FINISHED_TTL_SECONDS,
    KEEPALIVE_FRAME,
    KEEPALIVE_MS,
    AccountStop,
    Frame,
    StreamLost,
    TokenStreams,
    heartbeat_ttl,
)
from config.redis import async_client

log = logging.getLogger(__name__)


def _stream_key(message_id: int) -> str:
    return f"chat:tok:{message_id}"


def _beat_key(message_id: int) -> str:
    return f"chat:hb:{message_id}"


def _stop_key(message_id: int) -> str:
    return f"chat:stop:{message_id}"


STOP_CHANNEL = "chat:stop"
#: The stop listener's longest wait between two tries to subscribe again after losing Redis.
STOP_LISTENER_MAX_BACKOFF_SECONDS = 5.0


def hub_connection_name() -> str:
    """The client name of this process's reader connection, as Redis's CLIENT LIST shows it."""
    return f"sglchat-stream-hub-{os.getpid()}"


def _account_stop_key(user_id: int) -> str:
    return f"chat:account-stop:{user_id}"


def _account_stop_json(stop: AccountStop) -> bytes:
    return orjson.dumps({"account": stop.user_id, "refusal": stop.refusal, "at": stop.at})


def _stop_command(data) -> int | AccountStop | None:
    """A message id, or a suspension (JSON: {"account": user id, "refusal": {...}, "at": when}), as
    published."""
    try:
        if isinstance(data, str | bytes) and data[:1] in ("{", b"{"):
            decoded = orjson.loads(data)
            return AccountStop(
                user_id=int(decoded["account"]), refusal=dict(decoded["refusal"]), at=float(decoded.get("at", 0))
            )
        return int(data)
    except (TypeError, ValueError, KeyError):
        return None


def stop_listener_connection_name() -> str:
    """The client name of this process's stop listener connection, as Redis's CLIENT LIST shows it."""
    return f"sglchat-stop-listener-{os.getpid()}"


_STREAM_PREFIX = _stream_key(0)[:-1]


def _frame(entry_id: str, fields: dict) -> Frame:
    return Frame(id=entry_id, kind=fields["k"], data=orjson.loads(fields["d"]))


def _position(frame_id: str) -> tuple[int, int]:
    millis, _, seq = frame_id.partition("-")
    return int(millis), int(seq or 0)


class _Reader:
    """One local reader of one stream: the hub puts live frames on its queue."""

    __slots__ = ("queue",)

    def __init__(self):
        self.queue: asyncio.Queue[Frame] = asyncio.Queue()


class _Hub:
    """Fans every stream out to this process's readers, on one event loop.

    Frames appended in this process are handed to the local readers at once. Streams written
    elsewhere are read by one loop with one connection, blocked in one XREAD over all of them; a
    reader that starts following a new stream wakes it (CLIENT UNBLOCK) so it reads that one too.
    """

    BLOCK_MS = 5000

    def __init__(self, streams: RedisStreams):
        self.streams = streams
        self.readers: dict[int, set[_Reader]] = {}
        #: Streams written by a runner in this process.
        self.local: set[int] = set()
        #: Streams written elsewhere that local readers follow: the id read up to.
        self.cursors: dict[int, str] = {}
        self.version = 0  # bumped whenever `cursors` gains a stream
        self.loop_version = -1  # the version the reader loop's current XREAD was built from
        self.loop_task: asyncio.Task | None = None
        self.loop_connection_id: int | None = None

    def publish(self, message_id: int, frame: Frame) -> None:
        for reader in self.readers.get(message_id, ()):
            reader.queue.put_nowait(frame)

    async def follow(self, message_id: int, after: str | None, keepalive_ms: int) -> AsyncIterator[Frame]:
        reader = _Reader()
        # Registered before the replay, so a frame written meanwhile is queued (and de-duplicated below).
        self.readers.setdefault(message_id, set()).add(reader)
        try:
            seen = _position(after) if after else (-1, -1)
            for frame in await self.streams.read(message_id, after):
                seen = _position(frame.id)
                yield frame
                if frame.kind == DONE:
                    return
            if message_id not in self.local:
                await self._watch(message_id, f"{seen[0]}-{seen[1]}" if seen[0] >= 0 else "0-0")
            while True:
                try:
                    async with asyncio.timeout(keepalive_ms / 1000):
                        frame = await reader.queue.get()
                except TimeoutError:
                    yield KEEPALIVE_FRAME
                    continue
                position = _position(frame.id)
                if position <= seen:
                    continue
                seen = position
                yield frame
                if frame.kind == DONE:
                    return
        finally:
            readers = self.readers.get(message_id)
            if readers is not None:
                readers.discard(reader)
                if not readers:
                    del self.readers[message_id]
                    self.cursors.pop(message_id, None)

    async def _watch(self, message_id: int, cursor: str) -> None:
        current = self.cursors.get(message_id)
        if current is not None and _position(current) <= _position(cursor):
            return
        self.cursors[message_id] = cursor
        self.version += 1
        if self.loop_task is None or self.loop_task.done():
            self.loop_task = asyncio.get_running_loop().create_task(self._read_loop(), name="token-stream-hub")
            return
        # The loop may be blocked in an XREAD that does not name this stream yet: wake it. An unblock
        # sent just before it blocks does nothing, so try again until it has picked up the change.
        for _ in range(100):
            if self.loop_version >= self.version or self.loop_connection_id is None:
                return
            with contextlib.suppress(RedisError):
                if await self.streams.redis.client_unblock(self.loop_connection_id):
                    return
            await asyncio.sleep(0.002)

    async def _read_loop(self) -> None:
        connection: aioredis.Redis | None = None
        failures = 0
        try:
            while True:
                if not self.cursors:
                    # Before any await: a reader that starts watching from now on starts a new loop.
                    self.loop_task = None
                    return
                try:
                    if connection is None:
                        connection = aioredis.Redis.from_url(
                            self.streams.url, decode_responses=True, single_connection_client=True
                        )
                        await connection.client_setname(hub_connection_name())
                        self.loop_connection_id = await connection.client_id()
                    self.loop_version = self.version
                    streams = {_stream_key(mid): cursor for mid, cursor in self.cursors.items()}
                    reply = await connection.xread(streams, block=self.BLOCK_MS)
                    failures = 0
                except RedisError as exc:
                    failures += 1
                    log.warning("token-stream reader lost Redis (%r); retrying", exc)
                    self.loop_connection_id = None
                    if connection is not None:
                        with contextlib.suppress(Exception):
                            await connection.aclose()
                    connection = None
                    await asyncio.sleep(min(0.1 * 2**failures, 5))
                    continue
                for key, entries in reply or []:
                    message_id = int(key[len(_STREAM_PREFIX) :])
                    for entry_id, fields in entries:
                        if message_id not in self.cursors:
                            break  # nobody here follows it any more
                        frame = _frame(entry_id, fields)
                        self.cursors[message_id] = entry_id
                        self.publish(message_id, frame)
                        if frame.kind == DONE:
                            self.cursors.pop(message_id, None)
        finally:
            self.loop_connection_id = None
            if connection is not None:
                with contextlib.suppress(Exception):
                    await connection.aclose()


class RedisStreams(TokenStreams):
    def __init__(self, url: str):
        self.url = url
        self._hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub] = weakref.WeakKeyDictionary()

    @property
    def redis(self) -> aioredis.Redis:
        # One client per event loop (Celery tasks and tests run several), on the process's pool.
        return async_client(self.url)

    def _hub(self) -> _Hub:
        loop = asyncio.get_running_loop()
        hub = self._hubs.get(loop)
        if hub is None:
            hub = self._hubs[loop] = _Hub(self)
        return hub

    def producing(self, message_id: int) -> None:
        self._hub().local.add(message_id)

    async def append(self, message_id: int, kind: str, data: dict, *, continuing: bool = False) -> str:
        # NOMKSTREAM (Redis 6.2+): a continuing frame never starts a new stream on its own.
        frame_id = await self.redis.xadd(
            _stream_key(message_id), {"k": kind, "d": orjson.dumps(data)}, nomkstream=continuing
        )
        if frame_id is None:
            raise StreamLost(f"the token stream of message {message_id} is gone")
        self._hub().publish(message_id, Frame(id=frame_id, kind=kind, data=data))
        return frame_id

    async def finish(
        self,
        message_id: int,
        frames: Iterable[tuple[str, dict]] = (),
        ttl: int = FINISHED_TTL_SECONDS,
        *,
        continuing: bool = False,
    ) -> None:
        frames = list(frames)
        key = _stream_key(message_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            for kind, data in frames:
                pipe.xadd(key, {"k": kind, "d": orjson.dumps(data)}, nomkstream=continuing)
            pipe.expire(key, ttl)
            pipe.delete(_beat_key(message_id), _stop_key(message_id))
            replies = await pipe.execute()
        if continuing and frames and replies[0] is None:
            # Nothing was written (the answer is already saved: its heartbeat going now is harmless).
            raise StreamLost(f"the token stream of message {message_id} is gone")
        hub = self._hub()
        for (kind, data), frame_id in zip(frames, replies, strict=False):
            hub.publish(message_id, Frame(id=frame_id, kind=kind, data=data))
        hub.local.discard(message_id)

    async def restore(self, message_id: int, deltas: Iterable[tuple[str, str]]) -> None:
        key = _stream_key(message_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)  # whatever a reader's XREAD or a stray write left: rebuilt whole, in order
            for frame_id, text in deltas:
                pipe.xadd(key, {"k": DELTA, "d": orjson.dumps({"text": text})}, id=frame_id)
            await pipe.execute()

    async def read(self, message_id: int, after: str | None = None) -> list[Frame]:
        entries = await self.redis.xrange(_stream_key(message_id), min=f"({after}" if after else "-")
        return [_frame(entry_id, fields) for entry_id, fields in entries]

    async def follow(
        self, message_id: int, after: str | None = None, *, keepalive_ms: int = KEEPALIVE_MS
    ) -> AsyncIterator[Frame]:
        async for frame in self._hub().follow(message_id, after, keepalive_ms):
            yield frame

    async def exists(self, message_id: int) -> bool:
        return bool(await self.redis.exists(_stream_key(message_id)))

    async def beat(self, message_id: int, ttl: int | None = None) -> None:
        await self.redis.set(_beat_key(message_id), int(time.time()), ex=ttl or heartbeat_ttl())

    async def alive(self, message_ids: list[int]) -> set[int]:
        if not message_ids:
            return set()
        values = await self.redis.mget([_beat_key(mid) for mid in message_ids])
        return {mid for mid, value in zip(message_ids, values, strict=True) if value is not None}

    async def request_stop(self, message_id: int) -> None:
        # The flag covers a runner that starts (or checks) after the broadcast went out.
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(_stop_key(message_id), 1, ex=FINISHED_TTL_SECONDS)
            pipe.publish(STOP_CHANNEL, str(message_id))
            await pipe.execute()

    async def stop_requested(self, message_id: int) -> bool:
        return bool(await self.redis.exists(_stop_key(message_id)))

    async def stop_account(self, stop: AccountStop) -> None:
        data = _account_stop_json(stop)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(_account_stop_key(stop.user_id), data, ex=FINISHED_TTL_SECONDS)
            pipe.publish(STOP_CHANNEL, data)
            await pipe.execute()

    async def account_stopped(self, user_id: int) -> AccountStop | None:
        stop = _stop_command(await self.redis.get(_account_stop_key(user_id)))
        return stop if isinstance(stop, AccountStop) else None

    async def stop_commands(
        self, on_listening: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[int | AccountStop]:
        """Never ends because Redis went away: on a lost connection it subscribes again on a new one,
        waiting 0.1 s, then twice as long each try, at most STOP_LISTENER_MAX_BACKOFF_SECONDS, and logs
        one warning when it loses Redis and one line when it is back, not one per try. A stop broadcast
        while it was away is not heard here: `on_listening` is awaited each time the subscription is in
        effect (Redis's reply to SUBSCRIBE), so the caller can read the flags it may have missed."""
        failures = 0
        while True:
            # Its own connection, named for CLIENT LIST, with no retries inside redis-py: this loop is the retry.
            connection = aioredis.Redis.from_url(
                self.url,
                decode_responses=True,
                client_name=stop_listener_connection_name(),
                socket_connect_timeout=settings.REDIS_CONNECT_TIMEOUT_SECONDS,
                retry=Retry(NoBackoff(), 0),
            )
            pubsub = connection.pubsub()
            lost = "the subscription ended"
            try:
                await pubsub.subscribe(STOP_CHANNEL)
                async for item in pubsub.listen():
                    if item.get("type") == "subscribe":
                        if failures:
                            log.info("stop listener subscribed again after %d tries", failures)
                            failures = 0
                        if on_listening is not None:
                            await on_listening()
                    elif item.get("type") == "message":
                        command = _stop_command(item["data"])
                        if command is None:
                            log.warning("stop command %r ignored: neither a message id nor a suspension", item["data"])
                            continue
                        yield command
            except RedisError as exc:
                lost = f"{type(exc).__name__}: {exc}"
            finally:
                for closing in (pubsub, connection):
                    with contextlib.suppress(Exception):
                        await closing.aclose()
            failures += 1
            if failures == 1:
                log.warning("stop listener lost Redis (%s); subscribing again", lost)
            await asyncio.sleep(min(0.1 * 2 ** (failures - 1), STOP_LISTENER_MAX_BACKOFF_SECONDS))
