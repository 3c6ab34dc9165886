"""Turning the chat's JSON requests into service calls: the body, ids, and signed-in users only.

A refusal becomes its JSON error through config.http (the one place that decides the form, the status
and Retry-After); `json_endpoint` declares these endpoints as speaking the product's JSON.
"""

from __future__ import annotations

import functools
import inspect

from django.http import HttpRequest
from django.utils.translation import gettext as _

from chat.generation.start import Files
from config.http import JSON, refusal_response, speaks
from config.refusals import BadInput, Refusal
from config.text import read_json


class NotSignedIn(Refusal):
    status, code = 401, "unauthenticated"


def not_signed_in() -> NotSignedIn:
    return NotSignedIn(_("Sign in to continue."))


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


def optional_ids(value: object, name: str) -> list[int]:
    """A list of object ids from a client's JSON (at most 50), or [] for none."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > 50:
        raise BadInput(f"{name} must be a list of at most 50 whole numbers.")
    return [optional_id(v, name) or 0 for v in value]


def files_sent(data: dict) -> Files:
    """The files a message names (HTTP body or WebSocket frame): `document_ids`, `collection_ids`."""
    collections = data.get("collection_ids")
    return Files(
        document_ids=optional_ids(data.get("document_ids"), "document_ids"),
        collection_ids=None if collections is None else optional_ids(collections, "collection_ids"),
    )


def json_endpoint(view):
    """Signed-in users only (401 otherwise); a Refusal becomes its JSON error and status."""
    if inspect.iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_wrapper(request, *args, **kwargs):
            user = await request.auser()
            if not user.is_authenticated:
                return refusal_response(request, not_signed_in())
            try:
                return await view(request, *args, **kwargs)
            except Refusal as refusal:
                return refusal_response(request, refusal)

        return speaks(JSON)(async_wrapper)

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return refusal_response(request, not_signed_in())
        try:
            return view(request, *args, **kwargs)
        except Refusal as refusal:
            return refusal_response(request, refusal)

    return speaks(JSON)(wrapper)
