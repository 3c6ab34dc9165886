"""Billing rules at the HTTP edge: a rate limit for plain Django views.

`rate_limited(scope)` runs the same check_rate_limit the other transports call, so a page, an SSE
stream, the WebSocket consumer and the API all count in one window per user and scope. Refusals are
answered by config.http, in the form the request reads.
"""

from __future__ import annotations

import functools

from django.http import HttpRequest, HttpResponse

from billing.services.rate_limits import check_rate_limit
from config.http import client_ip, refusal_response
from config.refusals import Refusal


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
