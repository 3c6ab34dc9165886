"""What every token-stream store is: the interface, the frame, and the rules the stores share."""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from django.conf import settings
from redis.exceptions import RedisError

#: How long a finished stream stays readable (a reload within this window replays from Redis;
#: after it, readers get the saved message from the database instead).
FINISHED_TTL_SECONDS = 3600
#: A reader with nothing new for this long gets a keepalive frame (the transports then check
#: whether the answer ended some other way).
KEEPALIVE_MS = 15000

DELTA = "delta"
DONE = "done"
#: The engines were busy before the first token; the runner tries again after `retry_after` seconds.
BUSY = "busy"
KEEPALIVE = "keepalive"  # never stored: made by follow() while waiting


def heartbeat_ttl() -> int:
    """A generation that has not beaten for this long is considered dead (see chat.generation.reap)."""
    return settings.CHAT_HEARTBEAT_TTL_SECONDS


@dataclass(frozen=True)
class Frame:
    id: str
    kind: str
    data: dict = field(default_factory=dict)


KEEPALIVE_FRAME = Frame(id="", kind=KEEPALIVE)


@dataclass(frozen=True)
class AccountStop:
    """A suspension, broadcast with the stop commands: every running API completion of `user_id`, in
    whichever process it runs, ends with `refusal` (chat.suspension)."""

    user_id: int
    refusal: dict
    #: When it was sent (the sender's clock): a watch that started later is not ended by it.
    at: float = field(default_factory=time.time)


class StreamLost(RedisError):
    """The stream a runner had written to is gone: Redis lost its data (restarted without it, or
    failed over to a replica that never had it). Nothing was appended."""


class TokenStreams(ABC):
    """The interface. All methods are coroutines so every transport can await them.

    `continuing=True` on `append` and `finish` says the stream must already exist (the runner has
    written to it): if it does not, nothing is written and StreamLost is raised, so the runner can
    `restore` what it had sent before going on, rather than start a stream that lacks the answer's
    beginning (a reader replaying it would get half an answer)."""

    @abstractmethod
    async def append(self, message_id: int, kind: str, data: dict, *, continuing: bool = False) -> str: ...

    @abstractmethod
    async def finish(
        self,
        message_id: int,
        frames: Iterable[tuple[str, dict]] = (),
        ttl: int = FINISHED_TTL_SECONDS,
        *,
        continuing: bool = False,
    ) -> None:
        """Append the last `frames` (kind, data), keep the stream readable for `ttl` seconds, and
        drop its heartbeat and stop flag; one round trip."""
        ...

    async def restore(self, message_id: int, deltas: Iterable[tuple[str, str]]) -> None:  # noqa: B027
        """Write again the delta frames (id, text) a lost stream had, with their own ids, so every
        reader, replaying or resuming from an id it saw, gets exactly what it would have."""

    @abstractmethod
    async def read(self, message_id: int, after: str | None = None) -> list[Frame]:
        """The frames after `after` (from the start when None) written so far."""
        ...

    @abstractmethod
    def follow(
        self, message_id: int, after: str | None = None, *, keepalive_ms: int = KEEPALIVE_MS
    ) -> AsyncIterator[Frame]:
        """Every frame after `after`, replayed and then live, until the "done" frame (included).

        Yields a KEEPALIVE frame each time `keepalive_ms` passes with nothing new, so the transport
        can send a keepalive and check whether the message ended some other way.
        """

    def producing(self, message_id: int) -> None:  # noqa: B027  (only the Redis store needs to know)
        """Say that a runner in this process writes `message_id`'s stream (until `finish`)."""

    @abstractmethod
    async def exists(self, message_id: int) -> bool: ...

    @abstractmethod
    async def beat(self, message_id: int, ttl: int | None = None) -> None: ...

    @abstractmethod
    async def alive(self, message_ids: list[int]) -> set[int]:
        """Which of these generations have a live heartbeat."""
        ...

    @abstractmethod
    async def request_stop(self, message_id: int) -> None: ...

    @abstractmethod
    async def stop_requested(self, message_id: int) -> bool: ...

    @abstractmethod
    async def stop_account(self, stop: AccountStop) -> None:
        """Broadcast a suspension to every process's stop listener, and keep it for FINISHED_TTL_SECONDS
        (`account_stopped`) for a listener that was away when it was sent. A completion that starts
        after it is refused by its key check."""

    @abstractmethod
    async def account_stopped(self, user_id: int) -> AccountStop | None:
        """The last suspension sent for `user_id`, while it is kept."""

    @abstractmethod
    def stop_commands(
        self, on_listening: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[int | AccountStop]:
        """Message ids whose stop was requested, and suspensions, as they arrive (one listener per process).

        A stop is broadcast only to the listeners listening when it is requested; `on_listening` is
        awaited once this one is (its subscription in effect), before any command is yielded: from
        then on every stop reaches it, and the ones requested before can only be found by their flag
        (`stop_requested`)."""


#: ASCII digits only (`\d` takes any script's digits), and no newline before the end (`$` would).
FRAME_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


def is_frame_id(value: str) -> bool:
    """Whether a client-supplied resume point (Last-Event-ID) is a well-formed frame id: two whole
    numbers Redis can hold (64 bits each)."""
    return bool(FRAME_ID.fullmatch(value)) and all(int(part) < 2**64 for part in value.split("-"))
