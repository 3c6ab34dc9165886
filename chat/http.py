"""Turning HTTP requests into service calls and refusals into JSON errors, for the chat API views."""

from __future__ import annotations

import functools
import inspect

from django.http import HttpRequest, JsonResponse

from config.refusals import BadInput, Refusal
from config.text import read_json


def error_response(refusal: Refusal) -> JsonResponse:
    response = JsonResponse({"error": refusal.as_dict()}, status=refusal.status)
    if refusal.retry_after is not None:
        response["Retry-After"] = str(refusal.retry_after)
    return response


UNAUTHENTICATED = {"error": {"code": "unauthenticated", "message": "Sign in to continue.", "status": 401}}


def unauthenticated() -> JsonResponse:
    return JsonResponse(UNAUTHENTICATED, status=401)


def json_body(request: HttpRequest) -> dict:
    """The body's JSON object; a 400 for anything else (config.text.read_json: not JSON, too deep, NUL).
    Called by views behind `json_endpoint`, so only for a signed-in user."""
    if not request.body:
        return {}
    data = read_json(request.body)
    if not isinstance(data, dict):
        raise BadInput("The request body must be a JSON object.")
    return data


def optional_id(value: object, name: str) -> int | None:
    """An object id from a client's JSON (HTTP body or WebSocket frame), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{name} must be a whole number or null.")
    return value


def client_ip(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR")


def json_endpoint(view):
    """Signed-in users only (401 otherwise); a Refusal becomes its JSON error and status."""
    if inspect.iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_wrapper(request, *args, **kwargs):
            user = await request.auser()
            if not user.is_authenticated:
                return unauthenticated()
            try:
                return await view(request, *args, **kwargs)
            except Refusal as refusal:
                return error_response(refusal)

        return async_wrapper

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return unauthenticated()
        try:
            return view(request, *args, **kwargs)
        except Refusal as refusal:
            return error_response(refusal)

    return wrapper
