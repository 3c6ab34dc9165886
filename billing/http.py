"""Billing rules at the HTTP edge: a rate limit for plain Django views, and refusals as responses.

`rate_limited(scope)` runs the same check_rate_limit the other transports call, so a page, an SSE
stream, the WebSocket consumer and the API all count in one window per user and scope.
"""

from __future__ import annotations

import functools

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from billing.services.rate_limits import check_rate_limit
from config.refusals import Refusal


def client_ip(request: HttpRequest) -> str | None:
    # REMOTE_ADDR only: behind a proxy, the proxy must set it (Daphne's --proxy-headers does).
    return request.META.get("REMOTE_ADDR") or None


def wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "") and "text/html" not in request.headers.get(
        "Accept", ""
    )


def refusal_response(request: HttpRequest, refusal: Refusal) -> HttpResponse:
    """The refusal's status and message, as JSON for programs or the refusal page for people."""
    if wants_json(request):
        response = JsonResponse({"error": refusal.as_dict()}, status=refusal.status)
    else:
        response = render(request, "refusal.html", {"refusal": refusal}, status=refusal.status)
    if refusal.retry_after is not None:
        response["Retry-After"] = str(refusal.retry_after)
    return response


def refusals_as_responses(view):
    """Any Refusal the view raises becomes its status code and message."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except Refusal as refusal:
            return refusal_response(request, refusal)

    return wrapper


def rate_limited(scope: str):
    """Count the request against the user's (or, signed out, the address's) per-minute plan limit.

    Beyond the limit the view does not run: 429 with Retry-After and a message naming the limit and
    the plan that lifts it. Refusals raised by the view itself are answered the same way.
    """

    def decorate(view):
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            check_rate_limit(user=request.user, ip=client_ip(request), scope=scope)
            return view(request, *args, **kwargs)

        return refusals_as_responses(wrapper)

    return decorate
