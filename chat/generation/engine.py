"""The pipeline's view of the engine: one shared client per process, and the events that come back.

Every answer reaches its engine here (the chat's, the API's, titles and summaries), so the driver reads a
small, fixed set of events whatever the engine mode (native /generate or OpenAI-compatible). The
client (made by inference.connect, like every engine client) keeps its connections to the engine alive
between generations: it is made once per engine address and event loop (httpx connections cannot cross
loops), never per answer.

A job is routed before it gets here (`route_job`, one decision in `inference.routing`). A request
that fails before its first token is tried once more on another node; after the first token it is
never retried silently (the reader has seen text; the answer ends with that text and an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import RedisError

from chat.generation.response_cache import CachedAnswer, SimilarSlot
from chat.models import Message
from config import tracing
from inference import client as inference_client
from inference import health, rollout, routing, version_stats
from inference.connect import engine_client
from inference.errors import EngineError, EngineInternalError, EngineOverloaded, EngineTimeout, EngineUnavailable
from inference.events import ChoiceDelta

log = logging.getLogger(__name__)


@dataclass
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    #: Of prompt_tokens, those a vision model spent on images (reported to programs, billed as prompt).
    image_tokens: int = 0
    #: The counts of an answer served from the response cache (billed by the plan's rule for those):
    #: "exact" or "similar" (Message.cache_hit); "" for the engine's.
    cache_hit: str = ""

    @property
    def from_cache(self) -> bool:
        return bool(self.cache_hit)


#: What an answer from the response cache records as the node that served it.
CACHE_NODE = "response-cache"


@dataclass
class Job:
    """One request to the engine, from the web chat (an answer) or the API (no message)."""

    model: str
    rid: str
    messages: list[dict]
    max_tokens: int
    prompt_estimate: int
    #: Every turn of a conversation goes where its prefix is cached (the router's key, and the
    #: gateway's X-SMG-Routing-Key).
    routing_key: str | None = None
    #: One version of the model, by its node group (an evaluation of it); None: wherever routing says.
    node_group: str | None = None
    #: The model has Model routes (a rollout under way, or one that has ended while its routes stay):
    #: each request's end is counted against its node's version (inference.version_stats, a rollout's
    #: error-rate gate; the per-node metrics).
    under_rollout: bool = False
    #: Where it runs (set by `route_job`): the node's name (kept on the message and the ledger), its
    #: address and key, the name it knows the model by, and whether it is the Model Gateway.
    node: str = ""
    url: str = ""
    api_key: str = ""
    engine_model: str = ""
    via_gateway: bool = False
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    #: SGLang's request priority (inference.priority); None: not sent.
    priority: int | None = None
    #: A program's OpenAI fields beyond plain sampling (tools, response_format, logprobs, n...), passed
    #: to the engine's OpenAI-compatible route as they are (inference.client.GenerationRequest).
    engine_fields: dict | None = None
    #: A raw prompt to continue with no chat template (a program's text completion); else `messages`.
    prompt: str | None = None
    #: `messages` end with the assistant's unfinished answer, which the engine writes on from
    #: (SGLang's continue_final_message): the events carry the new text alone.
    continues_answer: bool = False
    #: The response cache's key for it, when its answer is to be kept once completed.
    cache_key: str | None = None
    #: The answer the response cache already has for it: replayed, the engine never asked; and whether
    #: it was this request's ("exact") or a similar first question's ("similar").
    cached: CachedAnswer | None = None
    cache_hit: str = ""
    #: Where the semantic cache files this first question's answer once written.
    similar_slot: SimilarSlot | None = None
    #: The version the cache key names (an answer is kept only if the node that wrote it serves it).
    cache_version: str = ""


@dataclass
class EngineEvent:
    text: str = ""
    usage: Usage | None = None
    finish_reason: str = ""
    #: Every choice's deltas, when the job has engine_fields (or tool turns).
    deltas: tuple[ChoiceDelta, ...] = ()


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, inference_client.SGLangClient]] = (
    weakref.WeakKeyDictionary()
)


#: Failures before the first token that another node may not share (a bad request would fail anywhere).
RETRYABLE = (EngineUnavailable, EngineOverloaded, EngineInternalError, EngineTimeout)


def route_job(job: Job, *, exclude: tuple[str, ...] = ()) -> Job:
    """Give `job` its node (synchronous: the node snapshot may be refreshed from the database).
    Raises inference.routing.NoNodeAvailable (a Busy refusal). An answer from the response cache goes
    to no node."""
    if job.cached is not None:
        job.node = CACHE_NODE
        return job
    with tracing.span("route") as span:
        route = routing.choose_node(job.model, job.routing_key, exclude=exclude, group=job.node_group)
        tracing.record(
            span,
            {
                "sglchat.route.node": route.node.name,
                "sglchat.route.policy": settings.INFERENCE_ROUTING,
                "sglchat.route.how": route.how,
                "sglchat.route.excluded": list(exclude) or None,
                "gen_ai.request.model": job.model,
            },
        )
    job.node, job.url, job.api_key = route.node.name, route.node.base_url, route.node.api_key
    job.under_rollout = rollout.group_weights(job.model) is not None
    job.engine_model, job.via_gateway = route.engine_model, route.via_gateway
    return job


async def route_job_async(job: Job, *, exclude: tuple[str, ...] = ()) -> Job:
    """`route_job` from a running event loop, on one of its worker threads (not the one thread that
    thread-sensitive calls share, where it would queue behind every answer's database work).

    Through `database_sync_to_async`, so the database connection the routing borrowed goes back to the
    pool when it returns: a worker thread that kept it would hold it out of the pool while it lives.
    """
    return await database_sync_to_async(route_job, thread_sensitive=False)(job, exclude=exclude)


async def close_clients() -> None:
    """Close the running loop's engine clients: for a short-lived loop (a Celery task's), before it ends."""
    clients = _clients.pop(asyncio.get_running_loop(), None) or {}
    for client in clients.values():
        await client.aclose()


def get_client(job: Job) -> inference_client.SGLangClient:
    """The running loop's shared client for the job's engine, made on first use."""
    loop = asyncio.get_running_loop()
    clients = _clients.get(loop)
    if clients is None:
        clients = _clients[loop] = {}
    client = clients.get(job.url)
    if client is None:
        # Idle connections are kept for as many generations as a busy process runs at once.
        client = clients[job.url] = engine_client(
            job.url,
            api_key=job.api_key,
            via_gateway=job.via_gateway,
            keepalive_connections=settings.ENGINE_KEEPALIVE_CONNECTIONS,
        )
    return client


async def _cancel_on(stop: asyncio.Event, client: inference_client.SGLangClient, rid: str) -> None:
    await stop.wait()
    # Repeated, because a stop that lands before the engine has the request would otherwise be lost.
    while True:
        await client.cancel(rid)
        await asyncio.sleep(0.5)


async def _replay(answer: CachedAnswer, kind: str, stop: asyncio.Event | None) -> AsyncIterator[EngineEvent]:
    for piece in answer.pieces:
        if stop is not None and stop.is_set():
            return  # stopped: what was replayed is billed (chat.generation.settle)
        yield EngineEvent(text=piece)
        await asyncio.sleep(0)  # one piece at a time, as the engine's stream gives them
    usage = Usage(
        prompt_tokens=answer.prompt_tokens,
        cached_tokens=answer.cached_tokens,
        completion_tokens=answer.completion_tokens,
        cache_hit=kind or Message.CacheHit.EXACT,
    )
    yield EngineEvent(usage=usage, finish_reason=answer.finish_reason)


async def stream(job: Job, stop: asyncio.Event | None = None) -> AsyncIterator[EngineEvent]:
    """The answer's events, from the job's node. Setting `stop` aborts the request on the engine, and
    the stream then ends with what the engine had produced and its token counts; closing the iterator
    early (or cancelling its consumer) aborts it too.

    If the node fails before the first token, the job is routed once more, away from it (its `node`
    then names the node that answered); the second failure is raised. An answer the response cache
    has is replayed piece by piece, as it was first written, and no engine is asked."""
    if job.cached is not None:
        async for event in _replay(job.cached, job.cache_hit, stop):
            yield event
        return
    tried: list[str] = []
    while True:
        started = False
        try:
            async for event in _stream_from_node(job, stop):
                if not started and (event.text or event.deltas or event.finish_reason):
                    started = True
                    if health.failing_here(job.node):
                        await _node_health(health.request_succeeded, job.node)
                yield event
            if job.under_rollout:
                await version_stats.count(job.node, failed=False)
            return
        except RETRYABLE as exc:
            stopped = stop is not None and stop.is_set()
            if job.under_rollout and exc.node_at_fault and not stopped:
                await version_stats.count(job.node, failed=True)
            if exc.node_at_fault and not (stopped or job.via_gateway):
                # Only the node's own failures (inference.errors); through the gateway, smg judges its workers.
                await _node_health(health.request_failed, job.node, exc.detail)
            if started or tried or job.via_gateway or stopped:
                raise
            routing.suspect(job.node)
            tried.append(job.node)
            with contextlib.suppress(routing.NoNodeAvailable):
                await route_job_async(job, exclude=tuple(tried))
            if job.node in tried:
                raise


async def _node_health(record, *args) -> None:
    """Tell the fleet's health how a request went; a failure to record it never fails the answer."""
    try:
        await database_sync_to_async(record)(*args)
    except (DatabaseError, RedisError):
        log.warning("could not record the health of node %s", args[0], exc_info=True)


async def _stream_from_node(job: Job, stop: asyncio.Event | None) -> AsyncIterator[EngineEvent]:
    request = inference_client.GenerationRequest(
        messages=job.messages if job.prompt is None else None,
        prompt=job.prompt,
        model=job.engine_model or job.model,
        max_new_tokens=job.max_tokens,
        rid=job.rid,
        temperature=job.temperature,
        top_p=job.top_p,
        stop=job.stop,
        seed=job.seed,
        routing_key=job.routing_key,
        priority=job.priority,
        openai_fields=job.engine_fields,
        stream_interval=settings.ENGINE_STREAM_INTERVAL,
        continue_final_message=job.continues_answer,
    )
    client = get_client(job)
    watcher = asyncio.get_running_loop().create_task(_cancel_on(stop, client, job.rid)) if stop else None
    sent = routing.sending(job.node)
    try:
        async for event in client.generate_stream(request):
            yield _translate(event)
    finally:
        routing.finished(job.node, sent)
        if watcher is not None:
            watcher.cancel()


def job_on_node(node: str, model: str) -> Job | None:
    """A job addressed to the node called `node` (the one that served an answer, for its tokenizer),
    or None when the fleet no longer has it. Synchronous: the node snapshot may be read."""
    route = routing.route_to(node, model) if node else None
    if route is None:
        return None
    return Job(
        model=model,
        rid="",
        messages=[],
        max_tokens=0,
        prompt_estimate=0,
        node=route.node.name,
        url=route.node.base_url,
        api_key=route.node.api_key,
        engine_model=route.engine_model,
        via_gateway=route.via_gateway,
    )


async def count_tokens(job: Job, text: str) -> int | None:
    """How many tokens the engine that served `job` makes of `text` (its own tokenizer, through
    SGLang's /v1/tokenize), or None when it cannot tell now.

    On a client of its own: it is asked only when an answer ended without the engine's counts (its
    stream broke, or its runner died), from the server's loop or from the reaper's."""
    if not text:
        return 0
    try:
        async with engine_client(job.url, api_key=job.api_key, via_gateway=job.via_gateway) as client:
            return await client.count_tokens(text, job.engine_model or job.model)
    except EngineError as exc:
        log.info("node %s could not count the tokens of a saved answer: %s", job.node, exc)
        return None


def _translate(event) -> EngineEvent:
    usage = None
    if event.usage is not None:
        usage = Usage(
            prompt_tokens=event.usage.prompt_tokens,
            cached_tokens=event.usage.cached_tokens,
            completion_tokens=event.usage.completion_tokens,
            image_tokens=event.usage.image_tokens,
        )
    return EngineEvent(text=event.text or "", usage=usage, finish_reason=event.finish_reason or "", deltas=event.deltas)
