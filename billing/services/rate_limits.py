"""Rate limits: one check for every transport (page, SSE, WebSocket, API), with the rate set by the plan.

A moving (sliding) window, from the `limits` library: each admitted request is remembered with its
time, and a request passes only while fewer than the plan's `requests_per_minute` were admitted in
the 60 seconds before it. So the plan's number is the true maximum in any 60 seconds (a fixed
one-minute window lets twice that through across its edge), and a refusal's Retry-After is the exact
time until the oldest counted request leaves the window. Refused requests are not counted.

The decision is atomic in the store: a Lua script in Redis wherever REDIS_URL is set (on the
process's shared connection pool, config.redis), a locked list in process memory otherwise (the
embedded default, one process). `check_rate_limit` and its async twin `acheck_rate_limit` share the
store, the keys and the rule, so both paths count in the same window.

django-ratelimit stays for the sign-in and sign-up floods by IP address (accounts), where a fixed
window is the right tool.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import threading
import time
import weakref
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisStorage as AsyncRedisStorage
from limits.aio.strategies import MovingWindowRateLimiter as AsyncMovingWindowRateLimiter
from limits.errors import StorageError
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import MovingWindowRateLimiter

from billing import selectors
from billing.models import Plan
from config import redis as shared_redis
from config.refusals import Busy, RateLimited

#: Redis keys: sglchat:rate:<scope>/<who>, a list of the admission times of the last minute.
KEY_PREFIX = "sglchat:rate"
#: The scopes of the answers' windows: every API key of a user shares `api`, the web chat's transports `chat`.
API_SCOPE, CHAT_SCOPE = "api", "chat"
STORE_DOWN_RETRY_AFTER = 5


class _PerMinute(RateLimitItemPerMinute):
    """The plan's rate, keyed by who and scope only (not by the rate itself, as `limits` would):
    requests made just before a plan change still count after it, so no one gets a fresh minute
    by switching plans, and an upgrade raises the ceiling at once."""

    def key_for(self, *identifiers: str) -> str:
        return "/".join(identifiers)


@dataclass(frozen=True)
class _Subject:
    plan: Plan
    key: str
    by_api_key: bool = False


def _network(ip: str) -> str:
    """IPv6 clients usually hold a whole /64, so one of them is one network, not 2**64 addresses."""
    address = ipaddress.ip_address(ip)
    if address.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False).network_address)
    return str(address)


def _subject(user, api_key_id: int | None, ip: str | None, plan: Plan | None = None) -> _Subject:
    signed_in = user is not None and user.is_authenticated
    if plan is None:
        plan = selectors.effective_plan(user) if signed_in else selectors.default_plan()
    if signed_in:
        # Keyed by the user, never by the API key: the plan's number is one person's, and a second
        # key (or a tenth) must not be a second minute's worth. The key only changes the wording.
        return _Subject(plan, f"user:{user.pk}", by_api_key=api_key_id is not None)
    if ip:
        return _Subject(plan, f"ip:{_network(ip)}")
    raise ValueError("An anonymous request must be rate limited by its IP address.")


# --- The store: one per process (sync), one per event loop (async, as redis.asyncio requires) ------

_lock = threading.Lock()
_limiters: dict[str | None, MovingWindowRateLimiter] = {}
_async_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncMovingWindowRateLimiter]] = (
    weakref.WeakKeyDictionary()
)


def moving_window_limiter() -> MovingWindowRateLimiter:
    """The process's moving-window limiter: Redis on the shared pool when REDIS_URL is set, else process
    memory. Every moving-window limit of the product uses it, each under its own scope."""
    url = settings.REDIS_URL or None
    with _lock:
        limiter = _limiters.get(url)
        if limiter is None:
            if url:
                # The pool carries the address; the URI only tells `limits` which client to use.
                storage = RedisStorage(
                    "redis://", connection_pool=shared_redis.sync_pool(url), key_prefix=KEY_PREFIX, wrap_exceptions=True
                )
            else:
                storage = MemoryStorage()
            limiter = _limiters[url] = MovingWindowRateLimiter(storage)
    return limiter


def _async_limiter() -> AsyncMovingWindowRateLimiter | None:
    """The running loop's Redis limiter, on that loop's shared pool; None without REDIS_URL."""
    url = settings.REDIS_URL or None
    if url is None:
        return None
    per_loop = _async_limiters.setdefault(asyncio.get_running_loop(), {})
    limiter = per_loop.get(url)
    if limiter is None:
        pool = shared_redis.async_client(url).connection_pool
        storage = AsyncRedisStorage(
            "async+redis://",
            implementation="redispy",
            connection_pool=pool,
            key_prefix=KEY_PREFIX,
            wrap_exceptions=True,
        )
        limiter = per_loop[url] = AsyncMovingWindowRateLimiter(storage)
    return limiter


# --- The decision ----------------------------------------------------------------------------------------


def _retry_after(reset_time: float) -> int:
    """Whole seconds until the oldest counted request leaves the window, rounded up, never 0."""
    return max(1, math.ceil(reset_time - time.time()))


def _busy() -> Busy:
    return Busy(
        _("Request limits cannot be checked right now. Try again in a few seconds."),
        retry_after=STORE_DOWN_RETRY_AFTER,
    )


def _refusal(subject: _Subject, retry_after: int, signed_in: bool) -> RateLimited:
    plan = subject.plan
    limit = plan.requests_per_minute
    if subject.by_api_key:
        reached = ngettext(
            "You reached the limit of %(count)s request a minute of the %(plan)s plan on the API, all your keys "
            "together.",
            "You reached the limit of %(count)s requests a minute of the %(plan)s plan on the API, all your keys "
            "together.",
            limit,
        )
    else:
        reached = ngettext(
            "You reached the limit of %(count)s request a minute of the %(plan)s plan.",
            "You reached the limit of %(count)s requests a minute of the %(plan)s plan.",
            limit,
        )
    better = selectors.cheapest_plan_with_more(plan, "requests_per_minute")
    if better is None:
        wait = ngettext("Try again in %(seconds)s second.", "Try again in %(seconds)s seconds.", retry_after)
    elif signed_in:
        wait = ngettext(
            "Try again in %(seconds)s second, or upgrade to %(better)s for %(more)s a minute.",
            "Try again in %(seconds)s seconds, or upgrade to %(better)s for %(more)s a minute.",
            retry_after,
        )
    else:
        wait = ngettext(
            "Try again in %(seconds)s second, or sign in and choose %(better)s for %(more)s a minute.",
            "Try again in %(seconds)s seconds, or sign in and choose %(better)s for %(more)s a minute.",
            retry_after,
        )
    values = {"count": limit, "plan": plan.name, "seconds": retry_after}
    if better is not None:
        values.update(better=better.name, more=better.requests_per_minute)
    message = f"{reached % values} {wait % values}"
    return RateLimited(message, retry_after=retry_after, limit=plan.requests_per_minute, plan=plan.slug)


def check_rate_limit(
    *, user, api_key_id: int | None = None, ip: str | None = None, scope: str = "chat", plan: Plan | None = None
) -> None:
    """Count one request against the plan's per-minute limit; raise RateLimited (429) beyond it.

    Keyed by user (whichever of their API keys a request carries), else (anonymous) by IP network.
    Every transport of one kind of request passes the same `scope`, so they share one window: the
    web chat's page, SSE and WebSocket share `chat`, every API key of the user shares `api`.
    `plan` is the caller's effective plan when it already has it (it is then not looked up again).
    Raises Busy (503) when the store cannot be reached.
    """
    if not settings.RATELIMIT_ENABLE:
        return
    subject = _subject(user, api_key_id, ip, plan)
    rate = _PerMinute(subject.plan.requests_per_minute)
    limiter = moving_window_limiter()
    try:
        if limiter.hit(rate, scope, subject.key):
            return
        reset_time = limiter.get_window_stats(rate, scope, subject.key).reset_time
    except StorageError as error:
        raise _busy() from error
    raise _refusal(subject, _retry_after(reset_time), signed_in=user is not None and user.is_authenticated)


@dataclass(frozen=True)
class RequestWindow:
    """Where a subject stands in the plan's per-minute window: `reset_seconds` is the time until the
    oldest counted request leaves it (one more request passes then; 0 when none is counted)."""

    limit: int
    remaining: int
    reset_seconds: float


def request_window(
    *, user, api_key_id: int | None = None, ip: str | None = None, scope: str = CHAT_SCOPE, plan: Plan | None = None
) -> RequestWindow | None:
    """Read the window `check_rate_limit` decides on (same store, key and rate) without counting a
    request. None when limits are off (there is no window to state) or the store cannot be reached."""
    if not settings.RATELIMIT_ENABLE:
        return None
    subject = _subject(user, api_key_id, ip, plan)
    rate = _PerMinute(subject.plan.requests_per_minute)
    try:
        stats = moving_window_limiter().get_window_stats(rate, scope, subject.key)
    except StorageError:
        return None
    remaining = max(min(stats.remaining, rate.amount), 0)
    reset = 0.0 if remaining == rate.amount else max(stats.reset_time - time.time(), 0.0)
    return RequestWindow(limit=rate.amount, remaining=remaining, reset_seconds=reset)


async def acheck_rate_limit(
    *, user, api_key_id: int | None = None, ip: str | None = None, scope: str = "chat", plan: Plan | None = None
) -> None:
    """check_rate_limit for async callers: the same store, keys and decision, without a thread hop
    unless the plan has to be looked up (or a refusal worded)."""
    if not settings.RATELIMIT_ENABLE:
        return
    if plan is None:
        subject = await sync_to_async(_subject)(user, api_key_id, ip)
    else:
        subject = _subject(user, api_key_id, ip, plan)
    rate = _PerMinute(subject.plan.requests_per_minute)
    limiter = _async_limiter()
    if limiter is None:
        # The in-process store is shared with the sync path (one count per process); it only takes
        # a lock around a list, so it is called directly rather than from a thread.
        memory = moving_window_limiter()
        if memory.hit(rate, scope, subject.key):
            return
        reset_time = memory.get_window_stats(rate, scope, subject.key).reset_time
    else:
        try:
            if await limiter.hit(rate, scope, subject.key):
                return
            reset_time = (await limiter.get_window_stats(rate, scope, subject.key)).reset_time
        except StorageError as error:
            raise _busy() from error
    signed_in = user is not None and user.is_authenticated
    raise await sync_to_async(_refusal)(subject, _retry_after(reset_time), signed_in)
