"""Middleware hooks that run on the event loop, for the requests Daphne serves.

In async mode, Django's `MiddlewareMixin` takes each hook of a middleware to a thread and back
(asgiref's `sync_to_async`), for hooks that often only read a header or add one. `OnTheLoop` calls
them inline instead; config.loop_handler builds Daphne's chains from such middleware. It is for
middleware whose hooks do no I/O (no database, cache, session or file); one whose hook does I/O only
sometimes says so per request (`on_the_loop_for`), and that hook then goes to a thread. In sync mode
nothing changes. `AsyncCapable` is the same for a plain middleware class: one that serves both modes.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async


class OnTheLoop:
    """Mix in before a `MiddlewareMixin` class whose hooks do no I/O: in async mode they run inline (its
    process_view too, in config.loop_handler's chain)."""

    def on_the_loop_for(self, request) -> bool:
        """Whether this request's hooks may run inline (a twin says no when one would do I/O)."""
        return True

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.on_the_loop_for(request):
                return self.process_response(request, response)
            return await sync_to_async(self.process_response)(request, response)
        return response


def parses_a_multipart_body(request) -> bool:
    """A multipart body (an upload) is parsed to a temporary file when a hook reads request.POST."""
    return request.method == "POST" and request.content_type == "multipart/form-data"


class AsyncCapable:
    """A plain middleware class (not a MiddlewareMixin) that serves Django's sync and async chains:
    `sync_call` in sync mode, `__acall__` in async mode."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.choose_mode(get_response)

    def choose_mode(self, get_response) -> None:
        """Async when the rest of the chain is (for a subclass whose own __init__ does more)."""
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.async_mode:
            return self.__acall__(request)
        return self.sync_call(request)
