"""Overload is a 503 with Retry-After, never a 500.

Three places turn "too much at once" into a refusal a person (or program) understands:

- `ConcurrencyGate`, in front of Django in the ASGI application: when this process is already
  handling WEB_MAX_CONCURRENT_REQUESTS requests, the next one is answered 503 at once, before any
  database or Redis work. A request counts until its response starts; a long SSE stream or API
  stream counts only while it is being admitted, so thousands of readers can stay open.
  It also refuses new requests while the event loop runs late (`LoopLag` over WEB_MAX_LOOP_LAG_MS):
  a process whose CPU is spent cannot serve one more request well, and a refusal now (cheap, before
  Django) lets it finish the answers it has instead of making everyone wait.
- `OverloadMiddleware`: a view that cannot get a database connection from the pool in time, or
  cannot reach Redis, answers 503 instead of crashing.
- `server_error` (handler500): the same for failures outside a view (a session that cannot be
  loaded in a middleware), rendered without touching the session or the database.
"""

from __future__ import annotations

import asyncio
import sys

import redis.exceptions
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.utils.deprecation import MiddlewareMixin
from django.utils.translation import gettext_lazy

from config.http import refusal_response, send_refusal
from config.metrics import HTTP_RESPONSES
from config.refusal_counts import count_refusal
from config.refusals import Busy, Refusal, scheduled

#: Failures that mean "a backing service cannot serve this request right now".
OVERLOAD_ERRORS = (OperationalError, InterfaceError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)

RETRY_AFTER_SECONDS = 2
BUSY_MESSAGE = gettext_lazy(
    "The service is very busy right now. Try again in a few seconds; nothing you typed was lost."
)


class ServerError(Refusal):
    """Not a refusal of the request: a failure on our side, answered in the same forms (a 500)."""

    status, code, api_type = 500, "server_error", "server_error"


def busy() -> Busy:
    """The process's own overload: it does not know who asks, so the free back-off (shed first)."""
    return scheduled(Busy(BUSY_MESSAGE, retry_after=RETRY_AFTER_SECONDS), premium=False)


class OverloadMiddleware(MiddlewareMixin):
    """A view whose database or Redis cannot serve it in time answers 503 with Retry-After."""

    def process_exception(self, request: HttpRequest, exception: Exception):
        if isinstance(exception, OVERLOAD_ERRORS):
            return refusal_response(request, busy(), bare=True)
        return None


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: 503 when a backing service failed, else a plain 500 page; neither reads the session."""
    exception = sys.exc_info()[1]
    if isinstance(exception, OVERLOAD_ERRORS):
        return refusal_response(request, busy(), bare=True)
    return refusal_response(
        request, ServerError(gettext_lazy("Something went wrong on our side. It has been logged.")), bare=True
    )


class LoopLag:
    """How late this process's event loop runs, smoothed: a probe sleeps PROBE_SECONDS again and again
    and measures how much later than asked it wakes (work queued before it on the loop, or a CPU
    taken by others). Started on first use, on the loop that uses it."""

    PROBE_SECONDS = 0.05
    #: Weight of the newest probe: the estimate follows a sustained change within a few tenths of a second
    #: but one slow callback does not trip it.
    SMOOTHING = 0.3

    def __init__(self) -> None:
        self.ms = 0.0
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def current(self) -> float:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Another loop's lateness says nothing of this one (a short-lived loop that has ended, whose
            # probe will never run again): measured afresh here.
            self._loop, self.ms, self._task = loop, 0.0, None
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._probe(), name="loop-lag-probe")
        return self.ms

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        while loop is self._loop:
            asked = loop.time()
            await asyncio.sleep(self.PROBE_SECONDS)
            late = max((loop.time() - asked - self.PROBE_SECONDS) * 1000, 0.0)
            if loop is self._loop:
                self.ms += self.SMOOTHING * (late - self.ms)


#: The process's one probe (the gate and the WebSocket consumer ask the same one).
loop_lag = LoopLag()


def running_late() -> bool:
    """Whether this process's event loop runs later than WEB_MAX_LOOP_LAG_MS (0 turns the check off)."""
    limit = settings.WEB_MAX_LOOP_LAG_MS
    return limit > 0 and loop_lag.current() > limit


def reads_an_accepted_answer(view):
    """Declare a route that only reads an answer already accepted (its SSE stream): not new work, so a
    late loop does not refuse it. Kept through Django's decorators, like config.http.speaks."""
    view.reads_an_accepted_answer = True
    return view


def _follows_an_answer(scope) -> bool:
    if scope.get("method") != "GET":
        return False
    try:
        return getattr(resolve(scope["path"]).func, "reads_an_accepted_answer", False)
    except Resolver404:
        return False


class ConcurrencyGate:
    """ASGI middleware: at most WEB_MAX_CONCURRENT_REQUESTS HTTP requests of this process are being
    admitted at once; beyond that, 503 with Retry-After without touching anything else. It also counts
    every response by status for /metrics (it sees them all, its own 503s included), and each 429 and
    503 per minute for the staff dashboard (config.refusal_counts), once the response is sent, except a
    probe's (/readyz answers 503 while the process is not ready: nobody was refused)."""

    EXEMPT = ("/healthz", "/readyz", "/metrics")

    def __init__(self, app):
        self.app = app
        self.limit = settings.WEB_MAX_CONCURRENT_REQUESTS
        self.active = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        probe = scope["path"].startswith(self.EXEMPT)
        gated = self.limit > 0 and not probe
        if gated and (self.active >= self.limit or (running_late() and not _follows_an_answer(scope))):
            return await self._refuse(scope, send)
        if gated:
            self.active += 1
        started = False
        status = 0

        async def send_counting(message):
            nonlocal started, status
            if not started and message["type"] == "http.response.start":
                started = True
                if gated:
                    self.active -= 1
                status = message["status"]
                HTTP_RESPONSES.labels(str(status)).inc()
            await send(message)

        try:
            await self.app(scope, receive, send_counting)
        finally:
            if gated and not started:
                self.active -= 1
        if not probe:  # a probe's 503 (not ready) refused nobody
            await count_refusal(status)

    async def _refuse(self, scope, send) -> None:
        HTTP_RESPONSES.labels("503").inc()
        await send_refusal(scope, send, busy())
        await count_refusal(503)
