"""The OpenAI-compatible endpoints (`/v1/...`). Thin: authenticate, parse, start, render.

A completion, chat (`/v1/chat/completions`) or text (`/v1/completions`), is admitted, run and billed
by the driver every answer runs on (`api.completions.start`, `chat.generation.run`); this module
renders its events in the endpoint's shape (`api.responses.ChatShape`, `TextShape`), as a chunk
stream or a single body. The
driver runs on its own task: when the program goes away (a timeout, Ctrl-C) the response is cancelled,
which sets the completion's stop, and the driver aborts the engine request and bills what it wrote.
"""

from __future__ import annotations

import asyncio
import time

from channels.db import database_sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from api import answering, completions, responses
from api.requests import CompletionRequest, parse, parse_text_completion
from billing import services as billing
from billing.models import Plan
from chat.generation import run
from chat.generation.completion import Choice, Completion
from chat.generation.settle import BLOCKED, Ending
from chat.suspension import AccountWatch
from config.http import OPENAI, client_ip, refusal_response, speaks
from config.refusals import NotFound, Refusal
from inference import capabilities
from inference.catalogue import AUTO, ModelInfo, auto_models
from inference.events import ChoiceDelta


def _choices(ask: CompletionRequest, completion: Completion) -> list[Choice]:
    """Every choice asked for, in order, as written (one that wrote nothing is empty)."""
    return [completion.choices.get(index) or Choice(index) for index in range(ask.n)]


def _usage_body(ending: Ending) -> dict:
    usage = ending.usage
    if usage is None:
        return responses.usage(0, 0, 0)
    return responses.usage(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens, usage.image_tokens)


@csrf_exempt
@speaks(OPENAI)
async def chat_completions(request: HttpRequest):
    return await _serve(request, parse, responses.ChatShape)


@csrf_exempt
@speaks(OPENAI)
async def text_completions(request: HttpRequest):
    return await _serve(request, parse_text_completion, responses.TextShape)


async def _serve(request: HttpRequest, parse_body, shape: responses.Shape):
    """Authenticate, parse, admit and start one completion on the driver, then answer in `shape`."""
    try:
        # The key before the body: without a valid one, nothing is parsed (anyone can send 2.5 MB).
        key = request.api_key = await answering.authenticate(request)
        ask = parse_body(answering.read_body(request))
        generation = await database_sync_to_async(completions.start)(
            key,
            ask,
            client_ip(request),
            request.headers.get("X-Conversation-Key") or None,
            request.headers.get("Cache-Control", ""),
        )
        request.billing_period = generation.turn.billing  # what the response's rate-limit headers state
    except Refusal as refusal:
        return refusal_response(request, refusal)

    opened = await answering.open_completion(request, generation)
    if isinstance(opened, HttpResponse):
        return opened
    completion, first, watch = opened.completion, opened.first, opened.watch
    if ask.stream:
        response = answering.event_stream(_stream(shape, ask, generation, completion, first, watch))
    else:
        response = await _complete(request, shape, ask, generation, completion, opened.task, watch)
    response["x-cache"] = answering.cache_status(generation)
    return response


async def _complete(
    request: HttpRequest,
    shape: responses.Shape,
    ask: CompletionRequest,
    generation: run.Generation,
    completion: Completion,
    task: asyncio.Task,
    watch: AccountWatch,
) -> HttpResponse:
    try:
        # Shielded: if the program goes away now, the driver still settles; only this wait ends.
        ending: Ending = await asyncio.shield(task)
    except BaseException:
        generation.stop.set()
        raise
    finally:
        watch.stop()
    refusal = watch.refusal or answering.failure_of(ending)
    if refusal is not None:
        return refusal_response(request, refusal)
    blocked = ending.status == BLOCKED
    echoed = ask.prompt if ask.echo and ask.prompt else ""
    choices = [
        shape.choice(
            index=choice.index,
            content=echoed + ("" if blocked else choice.content),
            tool_calls=[] if blocked else list(choice.tool_calls.values()),
            finish_reason=answering.finish_reason_of(ending, choice),
            logprobs=choice.logprobs if ask.logprobs and not blocked else None,
        )
        for choice in _choices(ask, completion)
    ]
    return JsonResponse(
        responses.whole(
            shape,
            completion_id=shape.prefix + generation.job.rid,
            model=generation.job.model,
            choices=choices,
            usage_body=_usage_body(ending),
        )
    )


async def _stream(
    shape: responses.Shape,
    ask: CompletionRequest,
    generation: run.Generation,
    completion: Completion,
    first: list[ChoiceDelta] | Ending,
    watch: AccountWatch,
):
    """OpenAI's chunk stream: an opening per choice (chat's role chunk, an echoed prompt), every
    choice's pieces as they come (text, tool calls, logprobs), then each choice's finish, the usage
    if asked for, and [DONE]."""
    ids = {
        "completion_id": shape.prefix + generation.job.rid,
        "model": generation.job.model,
        "created": int(time.time()),
    }
    try:
        echoed = ask.prompt if ask.echo and ask.prompt else ""
        if opening := [c for i in range(ask.n) if (c := shape.opening(i, echoed)) is not None]:
            yield responses.chunk(shape, choices=opening, **ids)
        item = first
        while not isinstance(item, Ending):
            pieces = [
                shape.piece(
                    index=piece.index,
                    content=piece.content,
                    tool_calls=piece.tool_calls,
                    logprobs=list(piece.logprobs) if ask.logprobs and piece.logprobs else None,
                )
                for piece in item
            ]
            if pieces := [p for p in pieces if p is not None]:
                yield responses.chunk(shape, choices=pieces, **ids)
            item = await completion.next_pieces()
        ending = item
        refusal = watch.refusal or answering.failure_of(ending)
        if refusal is not None:
            yield responses.stream_error(refusal)
            yield responses.DONE
            return
        finishes = [shape.finish(c.index, answering.finish_reason_of(ending, c)) for c in _choices(ask, completion)]
        yield responses.chunk(shape, choices=finishes, **ids)
        if ask.include_usage:
            yield responses.chunk(shape, usage_body=_usage_body(ending), **ids)
        yield responses.DONE
    finally:
        # The program may have left mid-stream: stopping the completion aborts the engine request,
        # and the driver bills what was written.
        generation.stop.set()
        watch.stop()


def _key_user(request: HttpRequest):
    return completions.authenticate(request.headers.get("Authorization", "")).user


@require_GET
@speaks(OPENAI)
def models(request: HttpRequest) -> JsonResponse:
    try:
        user = _key_user(request)
    except Refusal as refusal:
        return refusal_response(request, refusal)
    plan = billing.effective_plan(user)
    data = [_model_object(plan, m) for m in billing.plan_models(plan) + billing.plan_embedding_models(plan)]
    return JsonResponse({"object": "list", "data": data})


def _model_object(plan: Plan, model: ModelInfo) -> dict:
    if model.kind == AUTO:  # what the models it may choose for this plan hold and can do
        chosen = [m for m in billing.plan_models(plan) if m.id in {a.id for a in auto_models() or ()}]
        return responses.model_object(
            model.id,
            context_window=max(billing.context_window(plan, m) for m in chosen),
            capabilities=capabilities.of_either([m.id for m in chosen]),
        )
    return responses.model_object(
        model.id, context_window=billing.context_window(plan, model), capabilities=capabilities.of_model(model.id)
    )


@require_GET
@speaks(OPENAI)
def model(request: HttpRequest, model_id: str) -> JsonResponse:
    try:
        user = _key_user(request)
        plan = billing.effective_plan(user)
        offered = billing.plan_models(plan) + billing.plan_embedding_models(plan)
        found = next((m for m in offered if m.id == model_id), None)
        if found is None:
            raise NotFound(
                f"The model '{model_id}' does not exist or is not available on your plan.",
                model=model_id,
                param="model",
            )
    except Refusal as refusal:
        return refusal_response(request, refusal)
    return JsonResponse(_model_object(plan, found))
