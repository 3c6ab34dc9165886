"""Typed refusals: the one shape every rule uses to say "no".

A service raises a Refusal subclass; each transport (HTML view, SSE, WebSocket, the OpenAI-style
API) turns it into its own form — an HTTP status with a message, an error frame, an OpenAI error
object — without deciding anything itself.
"""


class Refusal(Exception):
    status: int = 400
    code: str = "bad_request"
    #: The OpenAI error "type" the public API reports for this refusal.
    api_type: str = "invalid_request_error"

    def __init__(self, message: str, *, retry_after: int | None = None, **details):
        message = str(message)  # a lazy translation, in the language active where it is refused
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.details = details

    def as_dict(self) -> dict:
        data = {"code": self.code, "message": self.message, "status": self.status}
        if self.retry_after is not None:
            data["retry_after"] = self.retry_after
        return data


class BadInput(Refusal):
    status, code = 400, "bad_request"


class TooLarge(Refusal):
    status, code = 413, "too_large"


class ContextLengthExceeded(TooLarge):
    """A prompt too long for the context window, refused to a program: OpenAI's 400 and code, which
    its SDKs raise as BadRequestError and LangChain and LiteLLM read as a context overflow (a 413
    reaches them as a bare status error). The web chat's pages keep TooLarge's 413."""

    status, code = 400, "context_length_exceeded"


class NotAllowed(Refusal):
    status, code, api_type = 403, "forbidden", "permission_error"


class NotFound(Refusal):
    status, code = 404, "not_found"


class MethodNotAllowed(Refusal):
    status, code = 405, "method_not_allowed"


class RateLimited(Refusal):
    status, code, api_type = 429, "rate_limited", "rate_limit_error"

    def as_dict(self) -> dict:
        # Which limit: the chat page waits for an answer to finish ("answers_at_once") rather than a time.
        data = super().as_dict()
        if self.details.get("scope"):
            data["scope"] = self.details["scope"]
        return data


class QuotaExceeded(Refusal):
    status, code, api_type = 429, "quota_exceeded", "insufficient_quota"


class Busy(Refusal):
    status, code, api_type = 503, "busy", "server_error"

    def as_dict(self) -> dict:
        data = super().as_dict()
        if self.details.get("retry_schedule"):
            data["retry_schedule"] = self.details["retry_schedule"]
        return data


#: How many waits a busy schedule lists (the page gives up after as many retries).
BUSY_RETRIES = 8


def busy_delay(attempt: int, retry_after: float | None, *, premium: bool) -> float:
    """Seconds before busy retry `attempt` (0-based): the one back-off rule, for an answer waiting for
    an engine (`chat.generation.run`) and for a refused send (the schedule below, which the page
    follows). The server's Retry-After is the base; free requests back off exponentially (they are shed
    first, so hammering helps nobody), premium ones linearly (they are admitted first)."""
    base = max(1.0, retry_after or 2.0)
    if premium:
        return min(base * (attempt + 1), 30.0)
    return min(base * 2**attempt, 60.0)


def scheduled(busy: Busy, *, premium: bool) -> Busy:
    """`busy` with the waits before each retry (`retry_schedule`, whole seconds), decided here so a
    client only follows them. A refusal that does not know the caller's class gets the free one."""
    busy.details["retry_schedule"] = [
        round(busy_delay(attempt, busy.retry_after, premium=premium)) for attempt in range(BUSY_RETRIES)
    ]
    return busy


class Unauthenticated(Refusal):
    status, code = 401, "invalid_api_key"
