"""Django's handler for the requests Daphne serves, with its middleware on the event loop.

In async mode, Django's `MiddlewareMixin` takes each hook of a middleware to a thread and back
(asgiref's `sync_to_async`), the handler does the same for each `process_view`, and a single
sync-only middleware sends the whole chain to a thread made for the request. Most of these hooks
only read a header or add one. So Daphne's requests go through `LoopHandler`, Django's ASGI
handler with a chain whose every layer runs on the event loop:

- a middleware that is async-capable runs as it is;
- one of Django's (or a library's) whose hooks do no I/O is replaced by its twin here (`TWINS`),
  which calls them inline; a twin whose hook does I/O only sometimes (the session saved, messages
  stored, a multipart body parsed) takes that hook to a thread just then;
- anything else (sync-only, or a `MiddlewareMixin` whose hooks would each go to a thread) is refused
  when the handler is built (ImproperlyConfigured), so a new middleware cannot quietly send every
  request back to a thread.

Settings name Django's own classes (`manage.py check --deploy` looks for them there); the test
client and WSGI use them as they are. Views are unchanged: Django still runs a sync view on a thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from csp.middleware import CSPMiddleware as LibraryCSPMiddleware
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessionMiddleware
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.db import connections
from django.middleware.clickjacking import XFrameOptionsMiddleware as DjangoXFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware as DjangoCommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware as DjangoCsrfViewMiddleware
from django.middleware.locale import LocaleMiddleware as DjangoLocaleMiddleware
from django.middleware.security import SecurityMiddleware as DjangoSecurityMiddleware
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string
from whitenoise.middleware import WhiteNoiseMiddleware as LibraryWhiteNoiseMiddleware

from config.on_the_loop import AsyncCapable, OnTheLoop, parses_a_multipart_body


class SecurityMiddleware(OnTheLoop, DjangoSecurityMiddleware):
    """HTTPS redirect, HSTS, nosniff, the referrer and opener policies: header arithmetic."""


class CSPMiddleware(OnTheLoop, LibraryCSPMiddleware):
    """The policy, with the nonce a page's template asked for."""


class LocaleMiddleware(OnTheLoop, DjangoLocaleMiddleware):
    """The page's language from the language cookie or Accept-Language (no I/O), and Content-Language."""


class CommonMiddleware(OnTheLoop, DjangoCommonMiddleware):
    """Disallowed user agents and the appended slash (a URL resolved, nothing read)."""


class XFrameOptionsMiddleware(OnTheLoop, DjangoXFrameOptionsMiddleware):
    """The framing ban."""


class AuthenticationMiddleware(OnTheLoop, DjangoAuthenticationMiddleware):
    """Sets request.user and request.auser, both lazy: nothing is read until asked for."""


class CsrfViewMiddleware(OnTheLoop, DjangoCsrfViewMiddleware):
    """The token is read from the cookie and the header (or a form field); a multipart body, which
    reading the form field parses, is checked on a thread."""

    def on_the_loop_for(self, request) -> bool:
        return not parses_a_multipart_body(request)


class SessionMiddleware(OnTheLoop, DjangoSessionMiddleware):
    """The session is read lazily (by whoever asks for it); saved, on a thread, only when changed."""

    def on_the_loop_for(self, request) -> bool:
        session = getattr(request, "session", None)
        if session is None:
            return True
        return not ((session.modified or settings.SESSION_SAVE_EVERY_REQUEST) and not session.is_empty())


class MessageMiddleware(OnTheLoop, DjangoMessageMiddleware):
    """Messages are stored (a cookie, or the session when they do not fit), on a thread, only when a
    view added or read some."""

    def on_the_loop_for(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is None or not (storage.used or storage.added_new)


class WhiteNoiseMiddleware(AsyncCapable, LibraryWhiteNoiseMiddleware):
    """Static files: a dictionary lookup of the path (in production), the file served by Django's
    handler as any file response is. With autorefresh (DEBUG) the lookup reads the disk, on a thread."""

    sync_call = LibraryWhiteNoiseMiddleware.__call__

    def __init__(self, get_response=None, settings=settings):
        LibraryWhiteNoiseMiddleware.__init__(self, get_response, settings)
        self.choose_mode(get_response)

    async def __acall__(self, request):
        if self.autorefresh:
            static_file = await sync_to_async(self.find_file)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            return await sync_to_async(self.serve)(static_file, request)
        return await self.get_response(request)


#: The class in settings -> its twin that runs on the loop.
TWINS = {
    "django.middleware.security.SecurityMiddleware": SecurityMiddleware,
    "csp.middleware.CSPMiddleware": CSPMiddleware,
    "whitenoise.middleware.WhiteNoiseMiddleware": WhiteNoiseMiddleware,
    "django.contrib.sessions.middleware.SessionMiddleware": SessionMiddleware,
    "django.middleware.locale.LocaleMiddleware": LocaleMiddleware,
    "django.middleware.common.CommonMiddleware": CommonMiddleware,
    "django.middleware.csrf.CsrfViewMiddleware": CsrfViewMiddleware,
    "django.contrib.auth.middleware.AuthenticationMiddleware": AuthenticationMiddleware,
    "django.contrib.messages.middleware.MessageMiddleware": MessageMiddleware,
    "django.middleware.clickjacking.XFrameOptionsMiddleware": XFrameOptionsMiddleware,
}


#: The hooks MiddlewareMixin takes to a thread on every request (process_exception only when a view raised).
_EVERY_REQUEST_HOOKS = ("process_request", "process_view", "process_response")


def on_the_loop(entry: str):
    """The middleware class that serves `entry` (a settings path) in LoopHandler's chain."""
    middleware = TWINS.get(entry) or import_string(entry)
    hops = (
        isinstance(middleware, type)
        and issubclass(middleware, MiddlewareMixin)
        and not issubclass(middleware, OnTheLoop)
        and any(hasattr(middleware, hook) for hook in _EVERY_REQUEST_HOOKS)
    )
    if hops or not getattr(middleware, "async_capable", False):
        raise ImproperlyConfigured(
            f"{entry} would take every request to a thread: give it an async path, or mix in "
            "config.on_the_loop.OnTheLoop (hooks that do no I/O), or give it a twin in TWINS."
        )
    return middleware


def _view_hook(instance):
    """The instance's process_view for the async handler: inline when it runs on the loop (and this
    request's does no I/O), else on a thread as Django would run it."""
    hook = instance.process_view
    on_a_thread = sync_to_async(hook, thread_sensitive=True)
    if not isinstance(instance, OnTheLoop):
        return on_a_thread

    async def process_view(request, *args):
        if instance.on_the_loop_for(request):
            return hook(request, *args)
        return await on_a_thread(request, *args)

    return process_view


class RequestThreads:
    """The threads requests run their sync work on, kept from one request to the next.

    Django runs each request's sync work (its start and end signals, a sync view, the ORM calls of an
    async one) on a thread of the request's own, as asgiref's ThreadSensitiveContext makes it: a new
    single-thread executor per request, and another thread to join it at the end. Here a request
    borrows an idle executor and gives it back, so a thread is made only when more requests run at once
    than before (up to `keep` idle ones are kept), as a WSGI server's threads serve request after
    request. Only the event loop's thread takes and gives back, so no lock is needed.
    """

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._idle: list[ThreadPoolExecutor] = []

    def take(self) -> ThreadPoolExecutor:
        return self._idle.pop() if self._idle else ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        """Keep the executor of a request that ended (all its sync work, request_finished's included, done)."""
        if len(self._idle) < self.keep:
            self._idle.append(executor)
        else:
            self.retire(executor)

    @staticmethod
    def retire(executor: ThreadPoolExecutor) -> None:
        """End the executor's thread once the work it has is done, its database connections closed. For a
        request that did not end (cancelled: the server gave up on it after its client left), whose
        thread may still be running its sync work and whose request_finished never ran."""
        executor.submit(connections.close_all)
        executor.shutdown(wait=False)

    @contextlib.asynccontextmanager
    async def lent(self) -> AsyncIterator[None]:
        """The block's sync work (thread-sensitive calls included) runs on a kept thread of its own. An
        exception from that work means the work is over, and the thread is kept; a block cancelled
        while its work may still be running retires the thread."""
        executor = self.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                yield
        except Exception:
            self.give_back(executor)
            raise
        except BaseException:
            self.retire(executor)
            raise
        self.give_back(executor)

    def close(self) -> None:
        """End the kept threads, each closing its database connections first."""
        while self._idle:
            executor = self._idle.pop()
            executor.submit(connections.close_all).result()
            executor.shutdown()


#: The process's kept threads: Daphne's Django requests and the chat WebSocket's commands borrow them.
request_threads = RequestThreads()


class LoopHandler(ASGIHandler):
    """Django's ASGI handler with a chain (from the setting `middleware_setting`) that runs on the loop."""

    middleware_setting = "MIDDLEWARE"
    threads = request_threads

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)  # Django's own refusal
        async with self.threads.lent():
            await self.handle(scope, receive, send)

    def load_middleware(self, is_async=False):
        if not is_async:
            raise ImproperlyConfigured("LoopHandler serves ASGI only.")
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response_async)
        for entry in reversed(getattr(settings, self.middleware_setting)):
            instance = on_the_loop(entry)(handler)
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(0, _view_hook(instance))
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(
                    self.adapt_method_mode(True, instance.process_template_response)
                )
            if hasattr(instance, "process_exception"):
                # Django runs the exception hooks synchronously (on a thread, and only when a view raised).
                self._exception_middleware.append(self.adapt_method_mode(False, instance.process_exception))
            handler = convert_exception_to_response(instance)
        self._middleware_chain = handler
