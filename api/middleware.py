"""What every `/v1` response carries, as OpenAI's API sends it, whatever answered (a view, a refusal, a
stream): added here, around the whole of Django's middleware, for sync and async requests alike.

- `x-request-id`: a fresh id for each request (`req_` and 32 hex digits; the SDKs expose it as
  `_request_id`), logged with the request (logger `api.requests`) so staff can find it. A caller's own
  `X-Client-Request-Id` (or `X-Request-Id`), if it is plain ASCII, is echoed as `x-client-request-id`
  and logged beside ours, never taken for ours.
- `x-ratelimit-*`: where the key's owner stands in the plan's windows, read from the stores that
  enforce them without counting anything (billing.services `request_window`, `token_window`):
  requests per minute (the window every key of the user shares) and the tokens of the billing period.
- CORS, when API_CORS_ORIGINS names origins (settings): a preflight is answered at once, and every
  answer to an allowed origin says so and lets the page read the headers above. Never credentials.
- A wrong method on a known path (Django's bare 405) becomes OpenAI's JSON error with its `Allow`.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from dataclasses import dataclass

from asgiref.sync import iscoroutinefunction
from channels.db import database_sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.utils.cache import patch_vary_headers
from django.utils.decorators import sync_and_async_middleware

from accounts.api_keys import usable_api_key
from api.completions import bearer_key
from billing import services as billing
from config import tracing
from config.http import refusal_response
from config.overload import OVERLOAD_ERRORS
from config.refusals import MethodNotAllowed
from config.text import shortened

logger = logging.getLogger("api.requests")

#: A caller's own request id is echoed only if it is printable ASCII without spaces, as OpenAI accepts.
CLIENT_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,512}")
CLIENT_REQUEST_ID_HEADERS = ("X-Client-Request-Id", "X-Request-Id")

CORS_METHODS = "GET, POST, OPTIONS"
#: What the official SDKs (Python and JavaScript) send, and the product's own X-Conversation-Key. Listed:
#: a wildcard would not cover Authorization.
CORS_REQUEST_HEADERS = ", ".join(
    [
        "Authorization",
        "Content-Type",
        "Accept",
        "OpenAI-Organization",
        "OpenAI-Project",
        "OpenAI-Beta",
        "Idempotency-Key",
        "X-Client-Request-Id",
        "X-Request-Id",
        "X-Conversation-Key",
        "X-Stainless-Arch",
        "X-Stainless-Async",
        "X-Stainless-Custom-Poll-Interval",
        "X-Stainless-Helper-Method",
        "X-Stainless-Lang",
        "X-Stainless-OS",
        "X-Stainless-Package-Version",
        "X-Stainless-Poll-Helper",
        "X-Stainless-Raw-Response",
        "X-Stainless-Read-Timeout",
        "X-Stainless-Retry-Count",
        "X-Stainless-Runtime",
        "X-Stainless-Runtime-Version",
        "X-Stainless-Stream-Helper",
        "X-Stainless-Timeout",
    ]
)
RATE_LIMIT_HEADERS = [
    f"x-ratelimit-{what}-{unit}" for unit in ("requests", "tokens") for what in ("limit", "remaining", "reset")
]
CORS_EXPOSED_HEADERS = ", ".join(["x-request-id", "x-client-request-id", "x-cache", *RATE_LIMIT_HEADERS, "retry-after"])
#: How long a browser may reuse a preflight's answer (browsers cap it: Chromium at 2 hours).
CORS_MAX_AGE = "600"


def is_api(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


def openai_duration(seconds: float) -> str:
    """A wait as OpenAI's headers write it: "250ms", "1s", "6m0s", "719h59m59s" (whole seconds, rounded up)."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    hours, rest = divmod(math.ceil(seconds), 3600)
    minutes, whole = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{whole}s"
    return f"{minutes}m{whole}s" if minutes else f"{whole}s"


@dataclass(frozen=True)
class Windows:
    """The key's owner and where they stand (either window None when it cannot be read)."""

    user_id: int
    requests: billing.RequestWindow | None
    tokens: billing.TokenWindow | None

    def headers(self) -> dict[str, str]:
        headers = {}
        for unit, window in (("requests", self.requests), ("tokens", self.tokens)):
            if window is not None:
                headers[f"x-ratelimit-limit-{unit}"] = str(window.limit)
                headers[f"x-ratelimit-remaining-{unit}"] = str(window.remaining)
                headers[f"x-ratelimit-reset-{unit}"] = openai_duration(window.reset_seconds)
        return headers


def windows(request: HttpRequest) -> Windows | None:
    """The windows of the request's key's owner, read after the view (so they include this request);
    None without a usable key, or when they cannot be read now.

    The key and billing period the view already found (`request.api_key`, `request.billing_period`)
    are used rather than read again. Best effort: the answer has been given (a completion may be
    running and billed) by now, so a database with no connection to spare, or a Redis gone away,
    costs the headers, never the answer."""
    try:
        key = getattr(request, "api_key", None) or usable_api_key(bearer_key(request.headers.get("Authorization", "")))
        if key is None:
            return None
        period = getattr(request, "billing_period", None) or billing.current_period(key.user)
        requests = billing.request_window(user=key.user, api_key_id=key.pk, scope=billing.API_SCOPE, plan=period.plan)
        return Windows(user_id=key.user_id, requests=requests, tokens=billing.token_window(key.user, period=period))
    except OVERLOAD_ERRORS:
        logger.warning("the rate-limit headers of %s could not be read", request.path, exc_info=True)
        return None


def client_request_id(request: HttpRequest) -> str | None:
    for name in CLIENT_REQUEST_ID_HEADERS:
        value = request.headers.get(name)
        if value and CLIENT_REQUEST_ID.fullmatch(value):
            return value
    return None


def allowed_origin(request: HttpRequest) -> str | None:
    """The Access-Control-Allow-Origin this request gets, or None (CORS off, no Origin, or not listed)."""
    origins, origin = settings.API_CORS_ORIGINS, request.headers.get("Origin")
    if not origins or not origin:
        return None
    if origins == ["*"]:
        return "*"
    return origin if origin.lower() in {allowed.lower() for allowed in origins} else None


def preflight(request: HttpRequest) -> HttpResponse | None:
    """The answer to a CORS preflight from an allowed origin (anything else goes on to the view)."""
    if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
        return None
    if allowed_origin(request) is None:
        return None
    response = HttpResponse(status=204)
    response["Access-Control-Allow-Methods"] = CORS_METHODS
    response["Access-Control-Allow-Headers"] = CORS_REQUEST_HEADERS
    response["Access-Control-Max-Age"] = CORS_MAX_AGE
    return response


def method_not_allowed(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Django's bare 405 as OpenAI's JSON error, naming the methods the path takes."""
    allowed = response.get("Allow", "")
    answer = refusal_response(
        request,
        MethodNotAllowed(
            f"Invalid method for this URL ({request.method} {shortened(request.path)}): use {allowed or 'another'}."
        ),
    )
    answer["Allow"] = allowed
    return answer


def finish(request: HttpRequest, response: HttpResponse, request_id: str, found: Windows | None) -> HttpResponse:
    if isinstance(response, HttpResponseNotAllowed):
        response = method_not_allowed(request, response)
    response["x-request-id"] = request_id
    caller_id = client_request_id(request)
    if caller_id is not None:
        response["x-client-request-id"] = caller_id
    if found is not None:
        for name, value in found.headers().items():
            response[name] = value
    origin = allowed_origin(request)
    if origin is not None:
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Expose-Headers"] = CORS_EXPOSED_HEADERS
    if settings.API_CORS_ORIGINS and settings.API_CORS_ORIGINS != ["*"]:
        patch_vary_headers(response, ["Origin"])  # the answer depends on who asks
    logger.info(
        "%s %s %s",
        request.method,
        request.path,
        response.status_code,
        extra={
            "request_id": request_id,
            "client_request_id": caller_id,
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "user_id": found.user_id if found is not None else None,
        },
    )
    return response


def new_request_id() -> str:
    """A fresh `x-request-id`, also put on the request's trace (staff find one from the other)."""
    request_id = f"req_{uuid.uuid4().hex}"
    tracing.record(tracing.current_span(), {"sglchat.request_id": request_id})
    return request_id


@sync_and_async_middleware
def api_headers(get_response):
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            if not is_api(request.path_info):
                return await get_response(request)
            request.request_id = request_id = new_request_id()
            response = preflight(request) or await get_response(request)
            # On a worker thread of its own, not the one thread-sensitive calls share: there it would
            # queue every response's headers behind every answer's database work.
            found = await database_sync_to_async(windows, thread_sensitive=False)(request)
            return finish(request, response, request_id, found)

    else:

        def middleware(request: HttpRequest) -> HttpResponse:
            if not is_api(request.path_info):
                return get_response(request)
            request.request_id = request_id = new_request_id()
            response = preflight(request) or get_response(request)
            return finish(request, response, request_id, windows(request))

    return middleware
