"""The OpenAI-compatible endpoints (`/v1/...`). Thin: authenticate, parse, call, render."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict

from channels.db import database_sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from accounts.api_keys import authenticate_api_key
from api import responses
from api.completions import Admitted, Progress, admit_completion, bearer_key, engine_refusal, settle_completion
from api.requests import InvalidRequest
from billing import services as billing
from billing.models import Plan
from chat.generation import admission, engine
from chat.generation.settle import write_retrying
from chat.http import client_ip
from chat.suspension import AccountWatch
from config import metrics
from config.refusals import NotFound, Refusal
from config.request_limits import too_large
from config.text import read_json
from inference.catalogue import ModelInfo
from inference.errors import EngineError
from moderation.services import OutputScreen


def _read_json(request: HttpRequest) -> object:
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise too_large(None, settings.DATA_UPLOAD_MAX_MEMORY_SIZE) from exc
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.")
    return read_json(raw)


def _record(progress: Progress, event) -> None:
    if event.text:
        if progress.ttft_ms is None:
            progress.ttft_ms = int((time.monotonic() - progress.started) * 1000)
        progress.parts.append(event.text)
    if event.usage is not None:
        progress.usage = event.usage
    if event.finish_reason:
        progress.finish_reason = event.finish_reason


def _finish_reason(progress: Progress) -> str:
    if progress.blocked:
        return "content_filter"
    return "length" if progress.finish_reason == "length" else "stop"


async def _screened(screen: OutputScreen, progress: Progress, *, final: bool = False) -> bool:
    """Screen the answer when a window is full (or at the end); True when it must be cut here."""
    text_length = sum(map(len, progress.parts))
    if (final or screen.due(text_length)) and await screen.check(progress.text) is not None:
        progress.blocked = True
    return progress.blocked


async def _record_flags(screen: OutputScreen, admitted: Admitted, progress: Progress) -> None:
    with contextlib.suppress(DatabaseError):
        await screen.finish(user_id=admitted.turn.user.pk, text=progress.text)


@csrf_exempt
async def chat_completions(request: HttpRequest):
    if request.method != "POST":
        return responses.error_response(InvalidRequest("Use POST for /v1/chat/completions."))
    try:
        # The key before the body: without a valid one, nothing is parsed (anyone can send 2.5 MB).
        key = await database_sync_to_async(authenticate_api_key)(bearer_key(request.headers.get("Authorization", "")))
        body = _read_json(request)
        admitted = await database_sync_to_async(admit_completion)(
            key, body, client_ip(request), request.headers.get("X-Conversation-Key") or None
        )
    except Refusal as refusal:
        return responses.error_response(refusal)

    lease = admission.keep_leased(admitted.job.rid)
    metrics.IN_FLIGHT.labels("api").inc()
    events = engine.stream(admitted.job)
    progress = Progress()
    try:
        # Wait for the engine's first event before answering, so an engine that is busy or down
        # gets a real status code (503) rather than a 200 with an error inside the stream.
        first = await anext(events, None)
    except EngineError as exc:
        lease.cancel()
        progress.failed = True
        await _settle(admitted, progress)
        return responses.error_response(engine_refusal(exc))
    except BaseException:
        lease.cancel()
        await asyncio.shield(_settle(admitted, progress))
        raise
    if first is not None:
        _record(progress, first)
    # From here on, a suspension of the account ends the completion (chat.suspension).
    watch = await AccountWatch(admitted.turn.user.pk).start()
    if admitted.request.stream:
        response = StreamingHttpResponse(
            _stream(admitted, events, progress, lease, watch), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    return await _complete(admitted, events, progress, lease, watch)


async def _complete(
    admitted: Admitted, events, progress: Progress, lease: asyncio.Task, watch: AccountWatch
) -> JsonResponse:
    screen = OutputScreen()
    try:
        if not await _screened(screen, progress):
            async for event in events:
                _record(progress, event)
                if watch.refusal is not None:
                    break  # suspended meanwhile: closing `events` (below) aborts the engine request
                if event.text and await _screened(screen, progress):
                    break  # closing `events` (below) aborts the engine request
            else:
                await _screened(screen, progress, final=True)
    except EngineError as exc:
        progress.failed = True
        await _settle(admitted, progress)
        return responses.error_response(engine_refusal(exc))
    finally:
        lease.cancel()
        await events.aclose()
        watch.stop()
    usage = await asyncio.shield(_settle(admitted, progress)) or progress.final_usage(admitted.job.prompt_estimate)
    await _record_flags(screen, admitted, progress)
    if watch.refusal is not None:
        return responses.error_response(watch.refusal)
    usage_body = responses.usage(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)
    return JsonResponse(
        responses.completion(
            completion_id=admitted.completion_id,
            model=admitted.job.model,
            text="" if progress.blocked else progress.text,
            finish_reason=_finish_reason(progress),
            usage_body=usage_body,
        )
    )


async def _stream(admitted: Admitted, events, progress: Progress, lease: asyncio.Task, watch: AccountWatch):
    """OpenAI's chunk stream. If the client goes away, closing `events` aborts the engine request."""
    ids = {"completion_id": admitted.completion_id, "model": admitted.job.model, "created": int(time.time())}
    screen = OutputScreen()
    try:
        yield responses.chunk(delta={"role": "assistant", "content": ""}, **ids)
        if progress.parts and not await _screened(screen, progress):
            yield responses.chunk(delta={"content": progress.text}, **ids)
        try:
            if not progress.blocked:
                async for event in events:
                    _record(progress, event)
                    if watch.refusal is not None:
                        # Suspended meanwhile: the stream ends with the refusal (closing `events` aborts).
                        yield responses.stream_error(watch.refusal)
                        yield responses.DONE
                        return
                    if event.text:
                        # A window that blocks is not sent; closing `events` (below) aborts the engine request.
                        if await _screened(screen, progress):
                            break
                        yield responses.chunk(delta={"content": event.text}, **ids)
                else:
                    await _screened(screen, progress, final=True)
        except EngineError as exc:
            progress.failed = True
            yield responses.stream_error(engine_refusal(exc))
            yield responses.DONE
            return
        yield responses.chunk(delta={}, finish_reason=_finish_reason(progress), **ids)
        if admitted.request.include_usage:
            usage = progress.final_usage(admitted.job.prompt_estimate)
            yield responses.chunk(
                delta={},
                usage_body=responses.usage(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens),
                **ids,
            )
        yield responses.DONE
    finally:
        lease.cancel()
        await events.aclose()
        watch.stop()
        await asyncio.shield(_settle_and_flag(admitted, progress, screen))


async def _settle_and_flag(admitted: Admitted, progress: Progress, screen: OutputScreen) -> None:
    """One shielded step: a stream's consumer may be cancelled as the client leaves after the end."""
    await _settle(admitted, progress)
    await _record_flags(screen, admitted, progress)


async def _settle(admitted: Admitted, progress: Progress):
    """Bill the completion, retrying a database that fails under it; a bill that still cannot be written
    is logged (the reservation then lapses) rather than breaking the response already sent."""
    metrics.IN_FLIGHT.labels("api").dec()
    usage = None
    with contextlib.suppress(DatabaseError):
        usage = await write_retrying(
            f"settling completion {admitted.completion_id}", settle_completion, admitted, progress
        )
    metrics.answer_ended(
        "api", progress.status, ttft_ms=progress.ttft_ms, **(asdict(usage) if usage is not None else {})
    )
    return usage


def _key_user(request: HttpRequest):
    return authenticate_api_key(bearer_key(request.headers.get("Authorization", ""))).user


@require_GET
def models(request: HttpRequest) -> JsonResponse:
    try:
        user = _key_user(request)
    except Refusal as refusal:
        return responses.error_response(refusal)
    plan = billing.effective_plan(user)
    data = [_model_object(plan, m) for m in billing.plan_models(plan)]
    return JsonResponse({"object": "list", "data": data})


def _model_object(plan: Plan, model: ModelInfo) -> dict:
    return responses.model_object(model.id, context_window=billing.context_window(plan, model))


@require_GET
def model(request: HttpRequest, model_id: str) -> JsonResponse:
    try:
        user = _key_user(request)
        plan = billing.effective_plan(user)
        found = next((m for m in billing.plan_models(plan) if m.id == model_id), None)
        if found is None:
            raise NotFound(
                f"The model '{model_id}' does not exist or is not available on your plan.",
                model=model_id,
                param="model",
            )
    except Refusal as refusal:
        return responses.error_response(refusal)
    return JsonResponse(_model_object(plan, found))
