"""Middleware hooks that run on the event loop, for the requests Daphne serves.

In async mode, Django's `MiddlewareMixin` takes each hook of a middleware to a thread and back
(asgiref's `sync_to_async`), for hooks that often only read a header or add one. `OnTheLoop` calls
them inline instead; config.loop_handler builds Daphne's chains from such middleware. It is for
middleware whose hooks do no I/O (no database, cache, session or file); one whose hook does I/O only
sometimes says so per request (`on_the_loop_for`), and that hook then goes to a thread. In sync mode
nothing changes.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async


class OnTheLoop:
    """Mix in before a `MiddlewareMixin` class whose hooks do no I/O: in async mode they run inline."""

    #: Read by LoopHandler: this middleware's process_view may run inline too.
    runs_on_the_loop = True

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
