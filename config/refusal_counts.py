"""Refusals for being too many (429) or too busy (503), counted per minute for the staff dashboard.

They are stored nowhere else, so each is counted as it is sent, in the two places every refusal
leaves through: the ASGI gate in front of every HTTP response (config.overload.ConcurrencyGate: pages,
the chat's JSON, answer streams, the API, its own 503s) and the chat WebSocket's error frame
(chat.consumers). One HINCRBY each, after the refusal has been sent; a count that cannot be written
(Redis unreachable) is dropped, never the refusal. Prometheus counts HTTP responses by status on its
own (config.metrics.HTTP_RESPONSES).
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from config.per_minute import MinuteCounts

log = logging.getLogger(__name__)

#: The statuses counted, as the dashboard names them.
COUNTED = (429, 503)

REFUSALS = MinuteCounts("refusals")


async def count_refusal(status: int) -> None:
    """Count one response or error frame with `status` (anything but 429 and 503 is ignored)."""
    if status not in COUNTED:
        return
    try:
        await REFUSALS.aadd(str(status))
    except (RedisError, OSError) as exc:
        log.debug("refusal %s not counted: %s", status, exc)


def per_minute(first_minute: int, minutes: int) -> dict[str, list[int]]:
    """Refusals by status for each minute from `first_minute` (a minute since the epoch), oldest first."""
    rows = REFUSALS.read(first_minute, minutes)
    return {str(status): [row.get(str(status), 0) for row in rows] for status in COUNTED}
