"""The OpenAI-compatible endpoints (`/v1/...`). Thin: authenticate, parse, start, render.

A completion is admitted, run and billed by the driver every answer runs on (`api.completions.start`,
`chat.generation.run`); this module renders its events as OpenAI's chunk stream or single body. The
driver runs on its own task: when the program goes away (a timeout, Ctrl-C) the response is cancelled,
which sets the completion's stop, and the driver aborts the engine request and bills what it wrote.
"""

from __future__ import annotations

import asyncio
import time

from channels.db import database_sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from api import completions, responses
from api.requests import CompletionRequest, InvalidRequest, parse
from billing import services as billing
from billing.models import Plan
from chat.generation import run
from chat.generation.completion import Completion
from chat.generation.settle import BLOCKED, FAILED, Ending
from chat.suspension import AccountWatch
from config.http import OPENAI, client_ip, refusal_response, speaks
from config.refusals import NotFound, Refusal
from config.request_limits import too_large
from config.text import read_json
from inference.catalogue import ModelInfo


def _read_json(request: HttpRequest) -> object:
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise too_large(None, settings.DATA_UPLOAD_MAX_MEMORY_SIZE) from exc
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.")
    return read_json(raw)


def _finish_reason(ending: Ending) -> str:
    if ending.status == BLOCKED:
        return "content_filter"
    return "length" if ending.finish_reason == "length" else "stop"


def _usage_body(ending: Ending) -> dict:
    usage = ending.usage
    if usage is None:
        return responses.usage(0, 0, 0)
    return responses.usage(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)


def _failed(ending: Ending) -> Refusal | None:
    """The refusal a completion that failed is answered with (its status code says what failed)."""
    if ending.status != FAILED:
        return None
    return completions.failure_refusal(ending.failure, ending.error)


@csrf_exempt
@speaks(OPENAI)
async def chat_completions(request: HttpRequest):
    if request.method != "POST":
        return refusal_response(request, InvalidRequest("Use POST for /v1/chat/completions."))
    try:
        # The key before the body: without a valid one, nothing is parsed (anyone can send 2.5 MB).
        key = await database_sync_to_async(completions.authenticate)(request.headers.get("Authorization", ""))
        ask = parse(_read_json(request))
        generation = await database_sync_to_async(completions.start)(
            key, ask, client_ip(request), request.headers.get("X-Conversation-Key") or None
        )
    except Refusal as refusal:
        return refusal_response(request, refusal)

    completion: Completion = generation.destination  # type: ignore[assignment]
    task = run.launch(generation)
    # From here on, a suspension of the account ends the completion (chat.suspension).
    watch = await AccountWatch(generation.turn.user.pk, on_refused=generation.stop.set).start()
    try:
        # Wait for the engine's first text (or the end) before answering, so an engine that is busy
        # or down gets a real status code (503) rather than a 200 with an error inside the stream.
        first = await completion.next()
    except BaseException:
        generation.stop.set()  # the program left: the driver aborts the engine request and bills it
        watch.stop()
        raise
    if isinstance(first, Ending) and (refusal := watch.refusal or _failed(first)) is not None:
        watch.stop()
        return refusal_response(request, refusal)
    if ask.stream:
        response = StreamingHttpResponse(
            _stream(ask, generation, completion, first, watch), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    return await _complete(request, generation, task, watch)


async def _complete(
    request: HttpRequest, generation: run.Generation, task: asyncio.Task, watch: AccountWatch
) -> HttpResponse:
    try:
        # Shielded: if the program goes away now, the driver still settles; only this wait ends.
        ending: Ending = await asyncio.shield(task)
    except BaseException:
        generation.stop.set()
        raise
    finally:
        watch.stop()
    refusal = watch.refusal or _failed(ending)
    if refusal is not None:
        return refusal_response(request, refusal)
    return JsonResponse(
        responses.completion(
            completion_id=f"chatcmpl-{generation.job.rid}",
            model=generation.job.model,
            text=ending.shown_text,
            finish_reason=_finish_reason(ending),
            usage_body=_usage_body(ending),
        )
    )


async def _stream(
    ask: CompletionRequest, generation: run.Generation, completion: Completion, first: str | Ending, watch: AccountWatch
):
    """OpenAI's chunk stream of the completion's text, then its end."""
    ids = {
        "completion_id": f"chatcmpl-{generation.job.rid}",
        "model": generation.job.model,
        "created": int(time.time()),
    }
    try:
        yield responses.chunk(delta={"role": "assistant", "content": ""}, **ids)
        item = first
        while isinstance(item, str):
            yield responses.chunk(delta={"content": item}, **ids)
            item = await completion.next()
        ending = item
        refusal = watch.refusal or _failed(ending)
        if refusal is not None:
            yield responses.stream_error(refusal)
            yield responses.DONE
            return
        yield responses.chunk(delta={}, finish_reason=_finish_reason(ending), **ids)
        if ask.include_usage:
            yield responses.chunk(delta={}, usage_body=_usage_body(ending), **ids)
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
    return responses.model_object(model.id, context_window=billing.context_window(plan, model))


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
