"""The token streams of the embedded default (no REDIS_URL): one process, everything in its memory."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from chat.generation.streams.base import (
    DONE,
    FINISHED_TTL_SECONDS,
    KEEPALIVE_FRAME,
    KEEPALIVE_MS,
    AccountStop,
    Frame,
    TokenStreams,
    heartbeat_ttl,
)


class LocalStreams(TokenStreams):
    """In-memory streams for the single-process embedded default."""

    def __init__(self):
        self._frames: dict[int, list[Frame]] = {}
        self._expires: dict[int, float] = {}
        self._waiters: dict[int, asyncio.Event] = {}
        self._beats: dict[int, float] = {}
        self._stops: set[int] = set()
        self._stop_queues: list[asyncio.Queue] = []
        self._account_stops: dict[int, tuple[AccountStop, float]] = {}
        self._seq = 0

    def _purge(self) -> None:
        now = time.monotonic()
        for mid in [mid for mid, deadline in self._expires.items() if deadline < now]:
            self._frames.pop(mid, None)
            self._expires.pop(mid, None)

    async def append(self, message_id: int, kind: str, data: dict, *, continuing: bool = False) -> str:
        # Memory is lost only with the process, and the runner with it: `continuing` never fails here.
        self._seq += 1
        frame = Frame(id=f"0-{self._seq}", kind=kind, data=data)
        self._frames.setdefault(message_id, []).append(frame)
        waiter = self._waiters.pop(message_id, None)
        if waiter is not None:
            waiter.set()
        return frame.id

    async def finish(
        self,
        message_id: int,
        frames: Iterable[tuple[str, dict]] = (),
        ttl: int = FINISHED_TTL_SECONDS,
        *,
        continuing: bool = False,
    ) -> None:
        for kind, data in frames:
            await self.append(message_id, kind, data)
        self._expires[message_id] = time.monotonic() + ttl
        self._beats.pop(message_id, None)
        self._stops.discard(message_id)

    def _after(self, message_id: int, after: str | None) -> list[Frame]:
        frames = self._frames.get(message_id, [])
        if after is None:
            return list(frames)
        floor = _seq_of(after)
        return [f for f in frames if _seq_of(f.id) > floor]

    async def read(self, message_id: int, after: str | None = None) -> list[Frame]:
        self._purge()
        return self._after(message_id, after)

    async def follow(
        self, message_id: int, after: str | None = None, *, keepalive_ms: int = KEEPALIVE_MS
    ) -> AsyncIterator[Frame]:
        cursor = after
        while True:
            self._purge()
            frames = self._after(message_id, cursor)
            if not frames:
                waiter = self._waiters.setdefault(message_id, asyncio.Event())
                try:
                    async with asyncio.timeout(keepalive_ms / 1000):
                        await waiter.wait()
                except TimeoutError:
                    yield KEEPALIVE_FRAME
                continue
            for frame in frames:
                yield frame
                if frame.kind == DONE:
                    return
            cursor = frames[-1].id

    async def exists(self, message_id: int) -> bool:
        self._purge()
        return message_id in self._frames

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

    async def stop_account(self, stop: AccountStop) -> None:
        # In one process no listener is ever away; kept alike, for as long.
        self._account_stops[stop.user_id] = (stop, time.monotonic() + FINISHED_TTL_SECONDS)
        for queue in self._stop_queues:
            queue.put_nowait(stop)

    async def account_stopped(self, user_id: int) -> AccountStop | None:
        stop, until = self._account_stops.get(user_id, (None, 0.0))
        return stop if time.monotonic() < until else None

    async def stop_commands(
        self, on_listening: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[int | AccountStop]:
        queue: asyncio.Queue = asyncio.Queue()
        self._stop_queues.append(queue)
        try:
            if on_listening is not None:
                await on_listening()
            while True:
                yield await queue.get()
        finally:
            self._stop_queues.remove(queue)


def _seq_of(frame_id: str) -> int:
    try:
        return int(frame_id.rsplit("-", 1)[-1])
    except ValueError:
        return -1
