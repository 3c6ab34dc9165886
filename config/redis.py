"""One Redis connection pool per process, shared by everything that talks to Redis.

The cache (rate limits and quotas go through it or beside it), the token streams, the admission
counter and the quota store all take their clients from here, so a request never pays for a new
connection: the synchronous pool is process-wide and thread-safe; asyncio clients belong to one event
loop each (redis.asyncio connections cannot cross loops), so there is one pool per running loop.

`None` everywhere when REDIS_URL is unset (the embedded default): callers then use their
in-process implementations.
"""

from __future__ import annotations

import asyncio
import threading
import weakref

import redis
import redis.asyncio as aioredis
from django.conf import settings

_lock = threading.Lock()
_sync_pools: dict[tuple[str, bool], redis.ConnectionPool] = {}
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, aioredis.Redis]] = (
    weakref.WeakKeyDictionary()
)


def _options(decode: bool = True) -> dict:
    return {
        "decode_responses": decode,
        "max_connections": settings.REDIS_MAX_CONNECTIONS,
        "socket_connect_timeout": settings.REDIS_CONNECT_TIMEOUT_SECONDS,
        "health_check_interval": 30,
    }


def sync_pool(url: str | None = None, *, decode: bool = True) -> redis.ConnectionPool | None:
    """The process's pool for `url` (default REDIS_URL): a blocking pool, so a burst waits briefly
    for a free connection instead of opening more than REDIS_MAX_CONNECTIONS.

    `decode=False` is the pool of clients that read bytes (Django's cache pickles its values).
    """
    url = url if url is not None else settings.REDIS_URL
    if not url:
        return None
    with _lock:
        pool = _sync_pools.get((url, decode))
        if pool is None:
            pool = redis.BlockingConnectionPool.from_url(
                url, timeout=settings.REDIS_CONNECT_TIMEOUT_SECONDS, **_options(decode)
            )
            _sync_pools[(url, decode)] = pool
        return pool


def sync_client(url: str | None = None) -> redis.Redis | None:
    """A client on the process's pool (clients are cheap; the pool holds the connections)."""
    pool = sync_pool(url)
    return None if pool is None else redis.Redis(connection_pool=pool)


def async_client(url: str | None = None) -> aioredis.Redis | None:
    """The running event loop's client for `url` (default REDIS_URL), made on first use."""
    url = url if url is not None else settings.REDIS_URL
    if not url:
        return None
    loop = asyncio.get_running_loop()
    clients = _async_clients.get(loop)
    if clients is None:
        clients = _async_clients[loop] = {}
    client = clients.get(url)
    if client is None:
        pool = aioredis.BlockingConnectionPool.from_url(
            url, timeout=settings.REDIS_CONNECT_TIMEOUT_SECONDS, **_options()
        )
        client = clients[url] = aioredis.Redis(connection_pool=pool)
    return client


async def close_async_clients() -> None:
    """Close the running loop's clients: for a short-lived loop (a Celery task's), before it ends."""
    clients = _async_clients.pop(asyncio.get_running_loop(), None) or {}
    for client in clients.values():
        await client.aclose(close_connection_pool=True)
