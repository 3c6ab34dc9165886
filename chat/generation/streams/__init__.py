"""Per-message token streams, stop flags and heartbeats.

A generation appends frames ("delta", then one "done") to its message's stream; any number of
readers (SSE responses, WebSocket consumers, in any process) replay it from any point and then
follow it live. Each frame has an id, so a reader that reconnects with the last id it saw misses
nothing and sees nothing twice.

One interface, two stores, laid out as Django lays out its cache backends:
- `base`: the interface (`TokenStreams`), the frame (`Frame`, its kinds) and what both stores share;
- `redis`: `RedisStreams`, whenever REDIS_URL is set (every process shares the streams);
- `local`: `LocalStreams`, the embedded default's (one process, in memory).

The rest of the product imports from this package, never from its modules: `get_streams()` gives
the process's store, chosen by settings.
"""

from __future__ import annotations

from django.conf import settings

from chat.generation.streams.base import (
    BUSY,
    DELTA,
    DONE,
    FINISHED_TTL_SECONDS,
    FRAME_ID,
    KEEPALIVE,
    KEEPALIVE_FRAME,
    KEEPALIVE_MS,
    AccountStop,
    Frame,
    StreamLost,
    TokenStreams,
    heartbeat_ttl,
    is_frame_id,
)
from chat.generation.streams.local import LocalStreams
from chat.generation.streams.redis import (
    STOP_CHANNEL,
    STOP_LISTENER_MAX_BACKOFF_SECONDS,
    RedisStreams,
    hub_connection_name,
    stop_listener_connection_name,
)

__all__ = [
    "BUSY",
    "DELTA",
    "DONE",
    "FINISHED_TTL_SECONDS",
    "FRAME_ID",
    "KEEPALIVE",
    "KEEPALIVE_FRAME",
    "KEEPALIVE_MS",
    "STOP_CHANNEL",
    "STOP_LISTENER_MAX_BACKOFF_SECONDS",
    "AccountStop",
    "Frame",
    "LocalStreams",
    "RedisStreams",
    "StreamLost",
    "TokenStreams",
    "get_streams",
    "heartbeat_ttl",
    "hub_connection_name",
    "is_frame_id",
    "stop_listener_connection_name",
]

_streams: TokenStreams | None = None


def get_streams() -> TokenStreams:
    """The process's token-stream store, chosen by settings (Redis when REDIS_URL is set)."""
    global _streams
    if _streams is None:
        _streams = RedisStreams(settings.REDIS_URL) if settings.REDIS_URL else LocalStreams()
    return _streams
