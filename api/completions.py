"""A chat completion for a program: admitted, generated and billed like a web chat answer.

The difference from the web chat is what a disconnect means: an API caller has no page to come
back to, so when it goes away the engine request is aborted and only the tokens produced are billed.
Nothing is stored as a conversation; the ledger row carries the API key instead.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from accounts.models import ApiKey
from api.requests import CompletionRequest, InvalidRequest, parse
from billing import services as billing
from chat.generation import admission
from chat.generation.admit import admit
from chat.generation.assemble import check_fits
from chat.generation.engine import Job, Usage, route_job
from chat.generation.turn import TurnContext, UnknownModel, resolve_turn
from chat.tokens import estimate_message_tokens, estimate_tokens
from config.refusals import Busy, NotFound, Refusal
from config.text import shortened
from inference import errors as engine_errors
from inference.priority import engine_priority


class EngineFailed(Refusal):
    status, code, api_type = 502, "engine_error", "server_error"


class EngineTimedOut(Refusal):
    status, code, api_type = 504, "engine_timeout", "server_error"


@dataclass
class Admitted:
    key: ApiKey
    request: CompletionRequest
    turn: TurnContext
    job: Job
    reservation: billing.Reservation
    completion_id: str


@dataclass
class Progress:
    """What the engine has produced so far, for the response and the bill."""

    parts: list[str] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str = ""
    #: When the engine was asked, and how long its first token took (for the metrics).
    started: float = field(default_factory=time.monotonic)
    ttft_ms: int | None = None
    failed: bool = False
    #: Cut by moderation (the response ends with finish_reason "content_filter").
    blocked: bool = False

    @property
    def status(self) -> str:
        """How it ended, in the chat's words: completed, stopped (the client left first), failed or blocked."""
        if self.blocked:
            return "blocked"
        if self.failed:
            return "failed"
        return "completed" if self.finish_reason else ("stopped" if self.parts else "failed")

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def final_usage(self, prompt_estimate: int) -> Usage:
        if self.usage is not None:
            return self.usage
        return Usage(prompt_tokens=prompt_estimate, completion_tokens=estimate_tokens(self.text))


def bearer_key(authorization: str) -> str | None:
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def admit_completion(
    key: ApiKey,
    body: object,
    ip: str | None,
    conversation_key: str | None = None,
) -> Admitted:
    """Read the request of `key` (authenticated first, `authenticate_api_key`, before its body was
    parsed), work out the turn's context, admit it and route it (one trip).

    `conversation_key` (the X-Conversation-Key header), or else the request's `user` field, keeps a
    program's conversation on the node that has its prefix cached, as the web chat's conversations are."""
    request = parse(body)
    try:
        turn = resolve_turn(key.user, request.model, max_output_tokens=request.max_tokens, api_key_id=key.pk, ip=ip)
    except UnknownModel as unknown:
        raise NotFound(
            f"The model '{shortened(request.model)}' does not exist. GET /v1/models lists yours.",
            model=request.model,
            param="model",
        ) from unknown
    billing.check_api_keys_allowed(turn.plan)
    turn = admission.serve_model(turn)
    # Nothing is left out of an API request: every message must fit, with room for the answer.
    prompt_estimate = sum(estimate_message_tokens(m["content"]) for m in request.messages)
    check_fits(turn, prompt_estimate, what="The messages", param="messages")
    last_user_text = next((m["content"] for m in reversed(request.messages) if m["role"] == "user"), "")
    rid = uuid.uuid4().hex
    reservation = admit(turn, text=last_user_text, prompt_tokens=prompt_estimate, generation_id=rid)
    job = Job(
        model=turn.model.id,
        rid=rid,
        messages=request.messages,
        max_tokens=turn.max_output_tokens,
        prompt_estimate=prompt_estimate,
        routing_key=conversation_key or request.user or None,
        temperature=request.temperature,
        top_p=request.top_p,
        stop=request.stop or None,
        seed=request.seed,
        priority=engine_priority(turn.priority),
    )
    try:
        route_job(job)
    except Refusal:
        billing.release(reservation)
        admission.release_now(rid)
        raise
    return Admitted(
        key=key, request=request, turn=turn, job=job, reservation=reservation, completion_id=f"chatcmpl-{rid}"
    )


def settle_completion(admitted: Admitted, progress: Progress) -> Usage | None:
    """Bill what was produced and give the admission place back; a request that produced nothing and
    failed is released, not billed."""
    admission.release_now(admitted.job.rid)
    if not progress.parts and progress.usage is None:
        billing.release(admitted.reservation)
        return None
    usage = progress.final_usage(admitted.job.prompt_estimate)
    billing.settle(
        admitted.reservation,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        completion_tokens=usage.completion_tokens,
        model=admitted.job.model,
        node=admitted.job.node,
        api_key_id=admitted.key.pk,
        generation_id=f"api:{admitted.job.rid}",
        user=admitted.turn.user,
        period=admitted.turn.billing,
    )
    return usage


def engine_refusal(exc: engine_errors.EngineError) -> Refusal:
    """The public face of an engine failure."""
    if isinstance(exc, engine_errors.EngineOverloaded):
        return Busy(exc.user_message, retry_after=exc.retry_after or 5)
    if isinstance(exc, engine_errors.EngineUnavailable):
        return Busy(exc.user_message, retry_after=5)
    if isinstance(exc, engine_errors.EngineTimeout):
        return EngineTimedOut(exc.user_message)
    if isinstance(exc, engine_errors.EngineBadRequest):
        return InvalidRequest(exc.user_message)
    return EngineFailed(exc.user_message)
