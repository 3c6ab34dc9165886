"""Typed engine errors: what went wrong talking to SGLang, and what to tell the user.

Every error carries ``user_message``, a short sentence safe to show in the chat UI, and ``detail``,
what the engine actually said (for logs). Callers choose behaviour by type:

- ``EngineUnavailable``: nothing answered, or the engine died mid-answer -> try another node later;
- ``EngineOverloaded``: the engine or gateway said 429/503 (or its queue timed out) -> retry after
  ``retry_after`` seconds;
- ``EngineTimeout``: connect, first token or the gap between tokens exceeded its limit (``phase``);
- ``EngineBadRequest``: the engine refused this request (prompt too long, bad parameter): retrying
  the same request will not help;
- ``EngineInternalError``: the engine failed while serving this request (HTTP 500);
- ``EngineAuthError``: the engine refused our API key (an operator problem, not the user's).

``node_at_fault`` says whether the error is evidence against the node (counted towards marking it down):
only a node that failed (unreachable, dead, silent, a 5xx) is. A request that could not be sent, or that
the engine refused for what it is (a 4xx), fails on any node; a busy node is not a broken one. So no
caller can take a node down for everyone by sending it something it refuses.

This module does not import Django, so the client stays usable from anywhere.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from typing import Literal

TimeoutPhase = Literal["connect", "first_token", "between_tokens", "total", "request"]


def gettext_noop(message: str) -> str:
    """Marks a sentence for the translation catalogue (makemessages knows the name) and returns it as it is.
    ``user_message`` is said in English: a chat answer's runner saves it with the answer outside any
    request, and the API speaks English; the page can show it translated from the catalogue. Django's own
    gettext_noop, without importing Django here."""
    return message


class EngineError(Exception):
    user_message = gettext_noop("The model server could not answer. Try again.")
    #: Whether this failure counts against the node's health (see the module's docstring).
    node_at_fault = True

    def __init__(self, detail: str, *, status_code: int | None = None, user_message: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status_code = status_code
        if user_message is not None:
            self.user_message = user_message


class EngineUnavailable(EngineError):
    user_message = gettext_noop("The model server is unavailable right now. Try again in a moment.")


class EngineOverloaded(EngineError):
    user_message = gettext_noop("The model server is busy. Try again in a few seconds.")
    node_at_fault = False  # busy is not broken

    def __init__(
        self,
        detail: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
        user_message: str | None = None,
    ) -> None:
        super().__init__(detail, status_code=status_code, user_message=user_message)
        self.retry_after = retry_after


class EngineTimeout(EngineError):
    user_message = gettext_noop("The model server took too long to answer. Try again.")

    def __init__(self, detail: str, *, phase: TimeoutPhase, user_message: str | None = None) -> None:
        super().__init__(detail, user_message=user_message)
        self.phase = phase


class EngineBadRequest(EngineError):
    user_message = gettext_noop("The model could not accept this request.")
    node_at_fault = False  # the request's fault: it would fail on any node


class EngineInternalError(EngineError):
    user_message = gettext_noop("The model server hit an error while answering. Try again.")


class EngineAuthError(EngineError):
    user_message = gettext_noop("The model server refused our credentials. The operators have been told.")
    node_at_fault = False  # the operators' configuration, not the node's health


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        from datetime import UTC, datetime

        return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


def error_for_status(status: int, detail: str, *, retry_after: float | None = None) -> EngineError:
    """The typed error for an HTTP status (or the ``code`` of an error event inside a stream)."""
    detail = detail or f"HTTP {status}"
    if status in (429, 503, 408):
        return EngineOverloaded(detail, status_code=status, retry_after=retry_after)
    if status in (401, 403):
        return EngineAuthError(detail, status_code=status)
    if status in (502, 504):
        return EngineUnavailable(detail, status_code=status)
    if 400 <= status < 500:
        if "context length" in detail or "too long" in detail:
            return EngineBadRequest(
                detail,
                status_code=status,
                user_message=gettext_noop(
                    "This conversation is too long for the model. Start a new conversation or shorten your message."
                ),
            )
        return EngineBadRequest(detail, status_code=status)
    if status >= 500:
        return EngineInternalError(detail, status_code=status)
    return EngineError(detail, status_code=status)
