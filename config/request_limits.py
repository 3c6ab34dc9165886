"""The one size limit on what a client sends: an HTTP body or a WebSocket frame.

`DATA_UPLOAD_MAX_MEMORY_SIZE` (settings: REQUEST_MAX_BYTES) is Django's own limit; Django alone
answers a body over it with a bare 400 page, and only for views that read the body. Here every
request that declares a longer body is refused with 413 and a sentence before anything reads it
(the CSRF check, a view, a form), in the form the caller reads (config.http decides: the OpenAI-style
error for the API, the chat's JSON error for its endpoints, the refusal page for a browser). The chat WebSocket asks
`frame_refusal` for each frame, against WS_MAX_FRAME_BYTES (below Daphne's own 1 MiB limit, beyond
which Daphne drops the connection before the application sees the frame).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from django.utils.deprecation import MiddlewareMixin
from django.utils.translation import gettext as _

from config.http import refusal_response
from config.on_the_loop import OnTheLoop
from config.refusals import TooLarge
from config.text import grouped


def _size(n: int) -> str:
    if n >= 1024 * 1024:
        return _("%(size)s MB (%(bytes)s bytes)") % {"size": f"{n / (1024 * 1024):.1f}", "bytes": grouped(n)}
    if n >= 1024:
        return _("%(size)s KB (%(bytes)s bytes)") % {"size": f"{n / 1024:.1f}", "bytes": grouped(n)}
    return _("%(bytes)s bytes") % {"bytes": grouped(n)}


def too_large(size: int | None, limit: int, what: str = "request") -> TooLarge:
    """`what`: "request" (an HTTP body) and "frame" (a WebSocket frame) are said in the page's language;
    anything else (the API's images, named by their place in the request) in English, as the API speaks."""
    values = {"size": _size(size) if size is not None else "", "limit": _size(limit)}
    if what == "request" and size is not None:
        message = _("The request is too large: it is %(size)s, and at most %(limit)s is accepted. Send less at once.")
    elif what == "request":
        message = _(
            "The request is too large: it is larger than that, and at most %(limit)s is accepted. Send less at once."
        )
    elif what == "frame" and size is not None:
        message = _("The frame is too large: it is %(size)s, and at most %(limit)s is accepted. Send less at once.")
    elif what == "frame":
        message = _(
            "The frame is too large: it is larger than that, and at most %(limit)s is accepted. Send less at once."
        )
    else:
        told = f"is {values['size']}" if size is not None else "is larger than that"
        return TooLarge(
            f"The {what} is too large: it {told}, and at most {values['limit']} is accepted. Send less at once.",
            param=None,
        )
    return TooLarge(message % values, param=None)


def body_refusal(request: HttpRequest) -> TooLarge | None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None:
        return None
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None  # Django's own parsing treats it as no body
    return too_large(length, limit) if length > limit else None


def frame_refusal(text: str | None, data: bytes | None) -> TooLarge | None:
    """The refusal for a WebSocket frame over the limit, or None."""
    limit = settings.WS_MAX_FRAME_BYTES
    size = len(data) if data is not None else len((text or "").encode("utf-8", "surrogatepass"))
    return too_large(size, limit, "frame") if size > limit else None


class RequestSizeLimitMiddleware(OnTheLoop, MiddlewareMixin):
    """413 for a declared body over the limit, before the CSRF check or a view reads it; and 413 (not
    Django's bare 400) when a body turns out too large while a view reads it."""

    def process_request(self, request):
        refusal = body_refusal(request)
        # Bare: before the user is read, and on the event loop (a page would read the session).
        return refusal_response(request, refusal, bare=True) if refusal is not None else None

    def process_exception(self, request, exception):
        if isinstance(exception, RequestDataTooBig):
            return refusal_response(request, too_large(None, settings.DATA_UPLOAD_MAX_MEMORY_SIZE))
        return None
