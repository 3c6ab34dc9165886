"""What every `/v1` endpoint that answers with a completion shares: reading the body, launching the
completion on the driver and waiting for its first piece (so an engine that is busy or down is a
real status code, not a 200 with an error inside), and the public face of how it ended. The chat
and text completions (`api.views`) and the Responses API (`api.response_views`) only render."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from accounts.models import ApiKey
from api import completions
from api.requests import InvalidRequest
from chat.generation import response_cache, run
from chat.generation.completion import Choice, Completion
from chat.generation.settle import BLOCKED, FAILED, Ending
from chat.suspension import AccountWatch
from config.http import refusal_response
from config.refusals import Refusal
from config.request_limits import too_large
from config.text import read_json
from inference.events import ChoiceDelta


async def authenticate(request: HttpRequest) -> ApiKey:
    """The request's key (401 without a usable one), checked before its body is read: without a
    valid key nothing is parsed (anyone can send 2.5 MB)."""
    return await database_sync_to_async(completions.authenticate)(request.headers.get("Authorization", ""))


def read_body(request: HttpRequest) -> object:
    """The request's JSON body, or a 400 (empty, malformed) or 413 (too large)."""
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise too_large(None, settings.DATA_UPLOAD_MAX_MEMORY_SIZE) from exc
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.")
    return read_json(raw)


def failure_of(ending: Ending) -> Refusal | None:
    """The refusal a completion that failed is answered with (its status code says what failed)."""
    if ending.status != FAILED:
        return None
    return completions.failure_refusal(ending.failure, ending.error)


def finish_reason_of(ending: Ending, choice: Choice | None = None) -> str:
    """A choice's finish as OpenAI names it: cut by moderation, called tools, ran out of room, or stopped."""
    if ending.status == BLOCKED:
        return "content_filter"
    said = choice.finish_reason if choice is not None and choice.finish_reason else ending.finish_reason
    if said == "tool_calls" and choice is not None and choice.tool_calls:
        return "tool_calls"
    return "length" if said == "length" else "stop"


@dataclass
class Opened:
    """A completion running on the driver, whose first piece (or end) has come."""

    generation: run.Generation
    completion: Completion
    task: asyncio.Task
    #: From here on, a suspension of the account ends the completion (chat.suspension).
    watch: AccountWatch
    first: list[ChoiceDelta] | Ending


async def open_completion(request: HttpRequest, generation: run.Generation) -> Opened | HttpResponse:
    """Launch `generation` and wait for its first piece; the refusal response if it failed first."""
    completion: Completion = generation.destination  # type: ignore[assignment]
    task = run.launch(generation)
    watch = AccountWatch(generation.turn.user.pk, on_refused=generation.stop.set).start()
    # Ended with the completion too: a program that leaves before its stream is read never reaches the
    # stream's own end, where the watch is stopped.
    task.add_done_callback(lambda _task: watch.stop())
    try:
        first = await completion.next_pieces()
    except BaseException:
        generation.stop.set()  # the program left: the driver aborts the engine request and bills it
        watch.stop()
        raise
    if isinstance(first, Ending) and (refusal := watch.refusal or failure_of(first)) is not None:
        watch.stop()
        return refusal_response(request, refusal)
    return Opened(generation, completion, task, watch, first)


def event_stream(events) -> StreamingHttpResponse:
    """Server-sent events, never cached nor buffered by a proxy (nginx's X-Accel-Buffering)."""
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def cache_status(generation: run.Generation) -> str:
    """The `x-cache` header (chat.generation.response_cache.status; docs/api.md)."""
    job = generation.job
    return response_cache.status(job.cache_hit if job.cached else "", kept=bool(job.cache_key or job.similar_slot))
