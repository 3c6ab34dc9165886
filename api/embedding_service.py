"""Embeddings for a program (`POST /v1/embeddings`): read the request, admit it under the key's plan,
run it on a node serving the embedding model, and bill its input tokens.

Admission, in order: the model (an embedding model, 404 when there is none by that name, 400 when it
is a chat model), the plan (API keys, then the model: 403), token-id inputs longer than the plan's
window on the model (billing.context_window, as /v1/models states it; 400 `context_length_exceeded`),
the plan's per-user API request window (429, shared with /v1/chat/completions: scope "api"), a node
that serves the model (503 with Retry-After), then a quota reservation (429) for at most what the
inputs can be: their token ids, or for text one token per UTF-8 byte plus a margin for special
tokens. A text that could be longer than the window is counted by the engine's own tokenizer before
it is embedded. The ledger row is the engine's count (usage.prompt_tokens; nothing cached, nothing
completed), priced by billing.pricing.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.db import DatabaseError

from accounts.models import ApiKey
from api.completions import failure_refusal
from billing import services as billing
from billing.selectors import BillingPeriod
from config.refusals import BadInput, ContextLengthExceeded, NotFound
from config.text import shortened, shown
from inference import embeddings as engine_embeddings
from inference import routing
from inference.catalogue import ModelInfo, get_embedding_model
from inference.errors import EngineBadRequest, EngineError
from inference.priority import engine_priority

log = logging.getLogger(__name__)

#: The most inputs one request may carry (OpenAI's own limit).
MAX_INPUTS = 2048
#: Special tokens a tokenizer may add to an input (BOS, EOS): part of the reservation's upper bound.
SPECIAL_TOKENS_MARGIN = 2
FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}
ENCODING_FORMATS = ("float", "base64")


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str
    #: Texts, or token-id lists (never both).
    inputs: list[str] | list[list[int]]
    encoding_format: str = "float"
    dimensions: int | None = None
    user: str = ""


@dataclass(frozen=True)
class Embeddings:
    vectors: list[list[float]]
    prompt_tokens: int
    #: The model id the caller asked for (not the engine's name for it).
    model: str


def _is_ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)


def _inputs(value: object) -> list[str] | list[list[int]]:
    if isinstance(value, str) or (_is_ids(value) and value):
        value = [value]
    if not isinstance(value, list) or not value:
        raise BadInput(
            "`input` must be a non-empty string, a list of strings, a list of token ids or a list of token-id lists.",
            param="input",
        )
    if len(value) > MAX_INPUTS:
        raise BadInput(
            f"`input` has {len(value):,} items; at most {MAX_INPUTS:,} are allowed per request.", param="input"
        )
    if all(isinstance(item, str) for item in value):
        if any(not item for item in value):
            raise BadInput("`input` cannot contain an empty string.", param="input")
        return list(value)
    if all(_is_ids(item) for item in value):
        if any(not item for item in value):
            raise BadInput("`input` cannot contain an empty list of token ids.", param="input")
        return [list(item) for item in value]
    raise BadInput(
        "`input` must be all strings or all token-id lists (non-negative integers), not a mixture.", param="input"
    )


def parse(body: object) -> EmbeddingRequest:
    """An OpenAI embeddings request, or a 400 naming what is wrong."""
    if not isinstance(body, dict):
        raise BadInput("The request body must be a JSON object.")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadInput(f"{shown(unknown[0])} is not supported by /v1/embeddings.", param=shortened(unknown[0]))
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadInput("`model` is required: the id of an embedding model (GET /v1/models).", param="model")
    encoding_format = body.get("encoding_format")
    if encoding_format is None:
        encoding_format = "float"
    if encoding_format not in ENCODING_FORMATS:
        raise BadInput(
            f"`encoding_format` must be 'float' or 'base64', not {shown(encoding_format)}.", param="encoding_format"
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1):
        raise BadInput("`dimensions` must be a positive integer.", param="dimensions")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise BadInput("`user` must be a string.", param="user")
    return EmbeddingRequest(
        model=model,
        inputs=_inputs(body.get("input")),
        encoding_format=encoding_format,
        dimensions=dimensions,
        user=user or "",
    )


def _too_long(model: ModelInfo, window: int, index: int, tokens: int) -> ContextLengthExceeded:
    return ContextLengthExceeded(
        f"Input {index} is {tokens:,} tokens, longer than the context window of {window:,} tokens on {model.id}.",
        param="input",
    )


def _upper_bound(item: str | list[int]) -> int:
    return len(item) if isinstance(item, list) else len(item.encode("utf-8", "surrogatepass")) + SPECIAL_TOKENS_MARGIN


@dataclass
class _Admitted:
    model: ModelInfo
    route: routing.Route
    reservation: billing.Reservation
    period: BillingPeriod
    priority: int | None
    #: The tokens one input may hold: the plan's window on the model (billing.context_window).
    window: int


def _admit(key: ApiKey, ask: EmbeddingRequest, ip: str | None) -> _Admitted:
    model = get_embedding_model(ask.model)
    if model is None:
        raise NotFound(
            f"The model '{shortened(ask.model)}' does not exist. GET /v1/models lists yours.",
            model=ask.model,
            param="model",
        )
    user = key.user
    period = billing.current_period(user)
    plan = period.plan
    billing.check_api_keys_allowed(plan)
    billing.check_model_allowed(plan, model.id)
    window = billing.context_window(plan, model)
    for index, item in enumerate(ask.inputs):
        if isinstance(item, list) and len(item) > window:
            raise _too_long(model, window, index, len(item))
    billing.check_rate_limit(user=user, plan=plan, api_key_id=key.pk, ip=ip, scope="api")
    route = routing.choose_node(model.id, ask.user or None)
    estimate = sum(min(_upper_bound(item), window) for item in ask.inputs)
    reservation = billing.reserve_quota(
        user, estimate, model=model.id, api_key_id=key.pk, period=period, prompt_tokens=estimate
    )
    return _Admitted(model, route, reservation, period, engine_priority(plan.priority_class), window)


def _settle(key: ApiKey, admitted: _Admitted, prompt_tokens: int, node: str) -> None:
    try:
        billing.settle(
            admitted.reservation,
            prompt_tokens=prompt_tokens,
            cached_tokens=0,
            completion_tokens=0,
            model=admitted.model.id,
            node=node,
            api_key_id=key.pk,
            generation_id=f"embed:{uuid.uuid4().hex}",
            user=key.user,
            period=admitted.period,
            embedding=True,
        )
    except DatabaseError:
        # The caller still gets its vectors; the reservation lapses (BILLING_RESERVATION_TTL_SECONDS).
        log.exception("the embedding request's usage could not be written (reservation %s)", admitted.reservation.id)


async def _check_long_texts(admitted: _Admitted, inputs: list[str] | list[list[int]]) -> None:
    """A text that might not fit is counted by the engine's own tokenizer (the bound is one per byte)."""
    for index, item in enumerate(inputs):
        if isinstance(item, str) and _upper_bound(item) > admitted.window:
            tokens = await engine_embeddings.count_tokens(admitted.route, item)
            if tokens > admitted.window:
                raise _too_long(admitted.model, admitted.window, index, tokens)


def _engine_refusal(exc: EngineError, ask: EmbeddingRequest, model: ModelInfo) -> Exception:
    if isinstance(exc, EngineBadRequest) and ("context length" in exc.detail or "too long" in exc.detail):
        # The engine's own window is smaller than the product's figure for the model (a configuration slip).
        return ContextLengthExceeded(
            f"An input is longer than the engine's context window: {exc.detail}", param="input"
        )
    if isinstance(exc, EngineBadRequest) and ask.dimensions is not None and "dimension" in exc.detail:
        return BadInput(
            f"The model {model.id} cannot give {ask.dimensions} dimensions: {exc.detail}", param="dimensions"
        )
    return failure_refusal(exc, "The embeddings could not be made.")


async def create_embeddings(key: ApiKey, ask: EmbeddingRequest, ip: str | None) -> Embeddings:
    """Admit, route, run and bill one embeddings request. Raises a Refusal."""
    admitted = await database_sync_to_async(_admit)(key, ask, ip)
    try:
        await _check_long_texts(admitted, ask.inputs)
        embedded = await engine_embeddings.embed(
            admitted.route,
            ask.inputs,
            model_id=admitted.model.id,
            dimensions=ask.dimensions,
            priority=admitted.priority,
        )
    except EngineError as exc:
        billing.release(admitted.reservation)
        raise _engine_refusal(exc, ask, admitted.model) from exc
    except BaseException:
        billing.release(admitted.reservation)
        raise
    await database_sync_to_async(_settle)(key, admitted, embedded.result.prompt_tokens, embedded.node)
    return Embeddings(
        vectors=embedded.result.vectors, prompt_tokens=embedded.result.prompt_tokens, model=admitted.model.id
    )
