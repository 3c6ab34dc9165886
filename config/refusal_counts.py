"""Refusals for being too many (429) or too busy (503), counted per minute for the staff dashboard.

They are stored nowhere else, so each is counted as it is sent, in the two places every refusal
leaves through: the ASGI gate in front of every HTTP response (config.overload.ConcurrencyGate: pages,
the chat's JSON, answer streams, the API, its own 503s) and the chat WebSocket's error frame
(chat.consumers). A process writes its counts together, at most FLUSH_SECONDS after the first of them,
in one round trip: at busy times refusals come by the hundred a second, and a write for each cost the
process as much as sending the refusal (issue 23's profile at three times capacity). This process's
counts not yet written are added when it reads (`per_minute`); a process that dies loses at most that
second's. A count that cannot be written (Redis unreachable) is dropped, never the refusal. Prometheus
counts HTTP responses by status on its own (config.metrics.HTTP_RESPONSES).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter

from redis.exceptions import RedisError

from config.per_minute import MinuteCounts, minute_of

log = logging.getLogger(__name__)

#: The statuses counted, as the dashboard names them.
COUNTED = (429, 503)

REFUSALS = MinuteCounts("refusals")
FLUSH_SECONDS = 1.0

#: This process's counts not yet written, (minute, status) -> count; and those being written.
_pending: Counter[tuple[int, str]] = Counter()
_writing: Counter[tuple[int, str]] = Counter()
_lock = threading.Lock()  # the dashboard reads them from a request thread
#: The task that writes them, with its loop (a test's loop may be gone when the next one counts).
_writer: tuple[asyncio.AbstractEventLoop, asyncio.Task] | None = None


async def count_refusal(status: int) -> None:
    """Count one response or error frame with `status` (anything but 429 and 503 is ignored)."""
    global _writer
    if status not in COUNTED:
        return
    with _lock:
        _pending[(minute_of(time.time()), str(status))] += 1
    loop = asyncio.get_running_loop()
    if _writer is None or _writer[0] is not loop or _writer[1].done():
        _writer = (loop, loop.create_task(_write_soon(), name="refusal-counts"))


async def _write_soon() -> None:
    while _pending:
        await asyncio.sleep(FLUSH_SECONDS)
        with _lock:
            batch = Counter(_pending)
            _pending.clear()
            _writing.update(batch)
        try:
            await REFUSALS.aadd_many(batch)
        except (RedisError, OSError) as exc:
            log.debug("%d refusals not counted: %s", batch.total(), exc)
        finally:
            with _lock:
                _writing.subtract(batch)
                for key in [key for key, count in _writing.items() if count <= 0]:
                    del _writing[key]


def forget_unwritten() -> None:
    """Drop this process's counts not yet written (a test that starts from none)."""
    with _lock:
        _pending.clear()


def per_minute(first_minute: int, minutes: int) -> dict[str, list[int]]:
    """Refusals by status for each minute from `first_minute` (a minute since the epoch), oldest first."""
    with _lock:
        unwritten = _pending + _writing
    rows = REFUSALS.read(first_minute, minutes)
    return {
        str(status): [
            row.get(str(status), 0) + unwritten[(first_minute + n, str(status))] for n, row in enumerate(rows)
        ]
        for status in COUNTED
    }
