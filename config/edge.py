"""What every HTTP request and response of the ASGI application goes through, Django's or not.

The application answers some requests outside Django's middleware: the answers' SSE streams
(chat/answer_stream.py, a Channels consumer) and the overload gate's own 503. So the rules every
response and every body must follow are kept here, in front of all of it (config/asgi.py):

- `SecurityHeaders` adds the headers Django's middleware gives its pages (the Content-Security-
  Policy, nosniff, the framing ban, the referrer and opener rules) to any response that lacks them,
  from the same settings: a Django page keeps its own (its policy carries the page's nonce).
- `BodyLimit` refuses a body over REQUEST_MAX_BYTES with 413 and a sentence (in the form config.http
  decides for the route) before the application reads it: at once when its declared Content-Length is
  over the limit, and, for a body sent without one (chunked), as soon as the bytes received pass it.
  Daphne itself keeps no more than the limit and one byte of any body (config/server.py), so a larger
  one never sits in the server's memory.
"""

from __future__ import annotations

from csp.utils import build_policy
from django.conf import settings

from config.http import header, send_refusal
from config.overload import ConcurrencyGate
from config.request_limits import too_large


def security_headers() -> list[tuple[bytes, bytes]]:
    """What Django's middleware gives every page, for the responses it does not write: the policy (no
    nonce: none of those responses has a script), nosniff, the framing ban, the referrer and opener rules."""
    return [
        (b"content-security-policy", build_policy().encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", settings.X_FRAME_OPTIONS.encode()),
        (b"referrer-policy", settings.SECURE_REFERRER_POLICY.encode()),
        (b"cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()),
    ]


class SecurityHeaders:
    """ASGI middleware: every HTTP response gets each security header it does not already carry."""

    def __init__(self, app):
        self.app = app
        self.headers = security_headers()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {bytes(name).lower() for name, _ in headers}
                missing = [(name, value) for name, value in self.headers if name not in present]
                if missing:
                    message = {**message, "headers": headers + missing}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _declared_length(scope) -> int | None:
    value = header(scope, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # not a number: left to the server and the application, as before


#: The one route whose body is a file (the chat's uploads, chat.files_api): its bodies may be up to
#: DOCUMENTS_UPLOAD_MAX_BYTES; every other route's, REQUEST_MAX_BYTES.
UPLOAD_PATH = "/chat/api/files"


def body_limit(path: str) -> int | None:
    """The most bytes a request's body may have on `path`."""
    if path == UPLOAD_PATH:
        return settings.DOCUMENTS_UPLOAD_MAX_BYTES
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


class BodyLimit:
    """ASGI middleware: 413 and a sentence for a body over its route's limit (body_limit), before the
    application reads it, on every route."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        limit = body_limit(scope.get("path", "")) if scope["type"] == "http" else None
        if limit is None:
            return await self.app(scope, receive, send)
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            return await send_refusal(scope, send, too_large(declared, limit))

        received = 0
        started = False
        refused = False

        async def counting_receive():
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # The application stops reading (a disconnect); the refusal is the response, unless
                    # the application had already started one.
                    refused = True
                    if not started:
                        await send_refusal(scope, send, too_large(None, limit))
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message):
            nonlocal started
            if refused and not started:
                return  # the refusal was sent instead
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counting_receive, tracking_send)


def http_edge(app):
    """The HTTP side of the ASGI application around `app`, outermost first: the security headers (so
    the refusals below get them too), the overload gate (which counts every response, 413s included),
    the body limit."""
    return SecurityHeaders(ConcurrencyGate(BodyLimit(app)))
