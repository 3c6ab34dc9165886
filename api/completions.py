"""A chat completion for a program: admitted, generated and billed like a web chat answer.

The difference from the web chat is what a disconnect means: an API caller has no page to come
back to, so when it goes away the engine request is aborted and only the tokens produced are billed.
Nothing is stored as a conversation; the ledger row carries the API key instead.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from django.conf import settings

from accounts.api_keys import authenticate_api_key
from accounts.models import ApiKey
from api.requests import CompletionRequest, InvalidRequest, parse
from billing import services as billing
from chat import services as chat_services
from chat.engine import Job
from chat.finish import Usage
from chat.tokens import estimate_message_tokens, estimate_tokens
from config.refusals import Busy, NotFound, Refusal
from inference import errors as engine_errors
from inference.catalogue import get_model


class EngineFailed(Refusal):
    status, code, api_type = 502, "engine_error", "server_error"


class EngineTimedOut(Refusal):
    status, code, api_type = 504, "engine_timeout", "server_error"


@dataclass
class Admitted:
    key: ApiKey
    request: CompletionRequest
    job: Job
    reservation: billing.Reservation
    completion_id: str


@dataclass
class Progress:
    """What the engine has produced so far, for the response and the bill."""

    parts: list[str] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str = ""

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


def admit_completion(raw_key: str | None, body: object, ip: str | None) -> Admitted:
    key = authenticate_api_key(raw_key)
    user = key.user
    billing.check_api_keys_allowed(user)
    request = parse(body)
    model = get_model(request.model)
    if model is None:
        raise NotFound(f"The model '{request.model}' does not exist. GET /v1/models lists yours.",
                       model=request.model, param="model")
    billing.check_model_allowed(user, request.model)
    plan = billing.effective_plan(user)
    max_tokens = request.max_tokens or plan.max_output_tokens
    if max_tokens > plan.max_output_tokens:
        raise InvalidRequest(f"max_tokens is {max_tokens}, but the {plan.name} plan allows at most "
                             f"{plan.max_output_tokens} tokens per answer.", "max_tokens")
    prompt_estimate = sum(estimate_message_tokens(m["content"]) for m in request.messages)
    window = min(plan.max_context_tokens, model.context_tokens)
    if prompt_estimate + max_tokens > window:
        raise InvalidRequest(f"The messages (about {prompt_estimate} tokens) plus max_tokens ({max_tokens}) exceed "
                             f"the {window}-token context of this model on the {plan.name} plan.", "messages")
    last_user_text = next((m["content"] for m in reversed(request.messages) if m["role"] == "user"), "")
    reservation = chat_services.admit(user, model=request.model, text=last_user_text, prompt_tokens=prompt_estimate,
                                      max_tokens=max_tokens, ip=ip, api_key_id=key.pk)
    rid = uuid.uuid4().hex
    job = Job(user_id=user.pk, model=request.model, rid=rid, messages=request.messages, max_tokens=max_tokens,
              prompt_estimate=prompt_estimate, node=settings.SGLANG_URL, temperature=request.temperature,
              top_p=request.top_p, stop=request.stop or None, seed=request.seed)
    return Admitted(key=key, request=request, job=job, reservation=reservation, completion_id=f"chatcmpl-{rid}")


def settle_completion(admitted: Admitted, progress: Progress) -> Usage | None:
    """Bill what was produced; a request that produced nothing and failed is released, not billed."""
    if not progress.parts and progress.usage is None:
        billing.release(admitted.reservation)
        return None
    usage = progress.final_usage(admitted.job.prompt_estimate)
    billing.settle(admitted.reservation, prompt_tokens=usage.prompt_tokens, cached_tokens=usage.cached_tokens,
                   completion_tokens=usage.completion_tokens, model=admitted.job.model, node=admitted.job.node,
                   api_key_id=admitted.key.pk, generation_id=f"api:{admitted.job.rid}")
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
