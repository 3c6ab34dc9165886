"""What the API adds to a completion: the caller's key, the program's request in the driver's terms,
and the public face of a failure. Admitting, running and billing are the driver's
(`chat.generation.completion`, `chat.generation.run`), as for every answer."""

from __future__ import annotations

from accounts.api_keys import authenticate_api_key
from accounts.models import ApiKey
from api.requests import CompletionRequest, InvalidRequest
from chat.generation import completion, response_cache, run
from chat.generation.turn import UnknownModel
from config.refusals import Busy, NotFound, Refusal
from config.text import shortened
from inference import capabilities, images
from inference import errors as engine_errors


class EngineFailed(Refusal):
    status, code, api_type = 502, "engine_error", "server_error"


class EngineTimedOut(Refusal):
    status, code, api_type = 504, "engine_timeout", "server_error"


def bearer_key(authorization: str) -> str | None:
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def authenticate(authorization: str) -> ApiKey:
    """The key of an `Authorization: Bearer ...` header, or the 401 refusal."""
    return authenticate_api_key(bearer_key(authorization))


#: The request fields that need a capability of the model (inference.capabilities).
NEEDS = {"tools": "tools", "response_format": "json_schema", "regex": "json_schema", "ebnf": "json_schema"}


def cache_control(header: str) -> str:
    """What a program's Cache-Control asks of the response cache: no-store (neither read nor keep),
    no-cache (do not read), or nothing."""
    directives = {part.strip().lower() for part in header.split(",")}
    return next((d for d in (response_cache.NO_STORE, response_cache.NO_CACHE) if d in directives), "")


def start(
    key: ApiKey,
    request: CompletionRequest,
    ip: str | None,
    conversation_key: str | None,
    cache_header: str = "",
) -> run.Generation:
    """Admit and route a program's completion (one trip). `conversation_key` (the X-Conversation-Key
    header), or else the request's `user` field, keeps a program's conversation on the node that has
    its prefix cached, as the web chat's conversations are."""
    ask = completion.Ask(
        model=request.model,
        messages=request.messages,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        stop=request.stop or None,
        seed=request.seed,
        engine_fields=request.engine_fields,
        choices=request.n,
        tools=request.tools,
        prompt=request.prompt,
        cache_control=cache_control(cache_header),
    )
    # What the model cannot do is refused by name before anything is held (for Auto, again once it chose).
    needs = {field: NEEDS[field] for field in request.engine_fields if field in NEEDS}
    capabilities.check(request.model, needs)
    if images.has_images(request.messages):
        capabilities.check_images(request.model)
    try:
        return completion.start_completion(
            key, ask, ip=ip, routing_key=conversation_key or request.user or None, needs=needs
        )
    except UnknownModel as unknown:
        raise NotFound(
            f"The model '{shortened(request.model)}' does not exist. GET /v1/models lists yours.",
            model=request.model,
            param="model",
        ) from unknown


def failure_refusal(failure: Exception | None, sentence: str) -> Refusal:
    """The public face of what ended a completion: a refusal as it was, an engine failure by its kind."""
    if isinstance(failure, Refusal):
        return failure
    if isinstance(failure, engine_errors.EngineOverloaded):
        return Busy(failure.user_message, retry_after=failure.retry_after or 5)
    if isinstance(failure, engine_errors.EngineUnavailable):
        return Busy(failure.user_message, retry_after=5)
    if isinstance(failure, engine_errors.EngineTimeout):
        return EngineTimedOut(failure.user_message)
    if isinstance(failure, engine_errors.EngineBadRequest):
        # The engine's own reason (a schema its grammar cannot compile, a tool it cannot find) is
        # about the program's request, and is what the program needs to fix it.
        return InvalidRequest(f"{failure.user_message.rstrip('.')}: {failure.detail[:300]}")
    if isinstance(failure, engine_errors.EngineError):
        return EngineFailed(failure.user_message)
    return EngineFailed(sentence)
