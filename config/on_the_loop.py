"""Middleware whose hooks run on the event loop, for the requests Django serves asynchronously.

In async mode, Django's `MiddlewareMixin` takes each of a middleware's hooks to a thread and back
(asgiref's `sync_to_async`), and the handler does the same for each `process_view`: a cost paid
on every request, for hooks that often only read headers or add one. `OnTheLoop` calls them inline
instead. It is for middleware whose `process_request`, `process_view` and `process_response` do
no I/O (no database, cache, session or file): arithmetic on the request and the response. In sync
mode nothing changes.
"""

from __future__ import annotations

from django.middleware.security import SecurityMiddleware as DjangoSecurityMiddleware


class OnTheLoop:
    """Mix in before `MiddlewareMixin` (or a class built on it) whose hooks do no I/O."""

    #: Read by config.api_handler: this middleware's process_view may run inline too.
    runs_on_the_loop = True

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class SecurityMiddleware(OnTheLoop, DjangoSecurityMiddleware):
    """Django's (HTTPS redirect, HSTS, nosniff, the referrer and opener policies): header arithmetic."""
