"""A refusal as an HTTP answer: decided here, once, for every route, Django's or not.

A rule says "no" with a `config.refusals.Refusal` (status, code, sentence, optional `retry_after`).
Over HTTP it is answered in one of three forms, and which one a request gets is decided only by
`refusal_form`:

- `OPENAI`: OpenAI's error object (`{"error": {"message", "type", "param", "code"}}`), so the official
  SDKs read it and raise the right exception: the endpoints of the OpenAI-compatible API;
- `JSON`: the product's JSON error (`{"error": {"code", "message", "status", …}}`): the chat's
  endpoints, and any request that asks for JSON (its Accept names JSON and not HTML);
- `PAGE`: a page for a person: everything else.

An endpoint for programs says which JSON it speaks where it is written (`speaks(OPENAI)` on the API's
views; `chat.http.json_endpoint` speaks `JSON`), and the decision reads that from the route the path
resolves to: so this module knows no app and no URL. The status, `Retry-After` and the body come from
the refusal, here too: `refusal_response` for Django's views and middleware, `bare_refusal` for what
answers outside Django (the edge, the overload gate, the answers' streams) or while something is broken
(a bare page: no session, no database, no static files).

`client_ip` is the one client address (for rate limits and audit), for a Django request and for an
ASGI scope (a WebSocket) alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.urls import Resolver404, resolve

from config.refusals import NotFound, Refusal

OPENAI, JSON, PAGE = "openai", "json", "page"

#: The pages sent without Django's request (no session, no database, no static files), by status;
#: any other status gets `refused.html`.
BARE_PAGES = {413: "413.html", 500: "500.html", 503: "503.html"}


def speaks(form: str) -> Callable:
    """Declare that a view is an endpoint for programs whose refusals are read as `form` (OPENAI or JSON).
    Kept through Django's decorators (they copy the view's attributes), so put it anywhere in the stack."""
    if form not in (OPENAI, JSON):
        raise ValueError(f"an endpoint speaks {OPENAI!r} or {JSON!r}, not {form!r}")

    def declare(view: Callable) -> Callable:
        view.refusal_form = form
        return view

    return declare


def declared_form(path: str) -> str | None:
    """What the view at `path` speaks, when it is an endpoint for programs (None: a page, or no route)."""
    try:
        match = resolve(path)
    except Resolver404:
        return None
    return getattr(match.func, "refusal_form", None)


def refusal_form(path: str, accept: str) -> str:
    """The one decision of which form a refusal takes: what the route's endpoint speaks, else JSON to a
    request whose Accept names JSON and not HTML, else a page."""
    return declared_form(path) or _by_accept(accept)


def request_form(request: HttpRequest) -> str:
    """`refusal_form` for a Django request (its route is already resolved when a view, or a middleware
    after the URL resolution, asks)."""
    match = getattr(request, "resolver_match", None)
    declared = getattr(match.func, "refusal_form", None) if match is not None else declared_form(request.path_info)
    return declared or _by_accept(request.headers.get("Accept", ""))


def _by_accept(accept: str) -> str:
    return JSON if "json" in accept and "text/html" not in accept else PAGE


def wants_json(request: HttpRequest) -> bool:
    """Whether this request reads refusals as JSON (either kind) rather than as a page."""
    return request_form(request) != PAGE


def openai_error(refusal: Refusal) -> dict:
    """OpenAI's error object for a refusal (the API's responses and its stream's last event)."""
    code = refusal.code
    if isinstance(refusal, NotFound) and refusal.details.get("model"):
        code = "model_not_found"
    return {
        "error": {
            "message": refusal.message,
            "type": refusal.api_type,
            "param": refusal.details.get("param"),
            "code": code,
        }
    }


def refusal_json(refusal: Refusal, form: str = JSON) -> dict:
    """The refusal's JSON body in `form` (OPENAI or JSON)."""
    return openai_error(refusal) if form == OPENAI else {"error": refusal.as_dict()}


def refusal_headers(refusal: Refusal) -> dict[str, str]:
    """The headers every answer to this refusal carries, whatever its form."""
    return {"Retry-After": str(refusal.retry_after)} if refusal.retry_after is not None else {}


def refusal_response(
    request: HttpRequest,
    refusal: Refusal,
    *,
    template: str = "refusal.html",
    context: Mapping[str, Any] | None = None,
    bare: bool = False,
) -> HttpResponse:
    """A Django view's or middleware's answer to `refusal`, in the form `request_form` decides. A page is
    `template` with `context` (by default the refusal page, with the refusal): a page that shows its own
    form again with the refusal beside it passes itself and what it shows. `bare` is the bare page
    instead, which needs nothing of the request (no session, no database)."""
    form = request_form(request)
    if form != PAGE:
        response: HttpResponse = JsonResponse(refusal_json(refusal, form), status=refusal.status)
    elif bare:
        response = HttpResponse(_bare_page(refusal), status=refusal.status)
    else:
        response = render(
            request, template, {"refusal": refusal} if context is None else context, status=refusal.status
        )
    for name, value in refusal_headers(refusal).items():
        response[name] = value
    return response


def _bare_page(refusal: Refusal) -> bytes:
    page = loader.get_template(BARE_PAGES.get(refusal.status, "refused.html"))
    return page.render({"message": refusal.message, "retry_after": refusal.retry_after}).encode()


def header(scope: Mapping, wanted: bytes) -> bytes | None:
    """One request header of an ASGI scope (the first, if repeated), or None."""
    for name, value in scope.get("headers", []):
        if bytes(name).lower() == wanted:
            return bytes(value)
    return None


def bare_refusal(scope: Mapping, refusal: Refusal) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The status, headers and body that answer `refusal` to an ASGI request outside Django: decided
    as for a view (`refusal_form`), the page being the bare one."""
    accept = (header(scope, b"accept") or b"").decode("latin-1")
    form = refusal_form(scope["path"], accept)
    if form == PAGE:
        body, content_type = _bare_page(refusal), b"text/html; charset=utf-8"
    else:
        body, content_type = json.dumps(refusal_json(refusal, form)).encode(), b"application/json"
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    headers += [(name.lower().encode(), value.encode()) for name, value in refusal_headers(refusal).items()]
    return refusal.status, headers, body


async def send_refusal(scope: Mapping, send: Callable, refusal: Refusal) -> None:
    """Answer an ASGI request with `refusal` (`bare_refusal`), whole."""
    status, headers, body = bare_refusal(scope, refusal)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def client_ip(source: HttpRequest | Mapping) -> str | None:
    """The address a request came from: a Django request's REMOTE_ADDR, or an ASGI scope's client (a
    WebSocket). Only that: behind a proxy, the proxy must set it (Daphne's --proxy-headers does)."""
    if isinstance(source, HttpRequest):
        return source.META.get("REMOTE_ADDR") or None
    client = source.get("client")
    return client[0] if client else None
