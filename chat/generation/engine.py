"""The pipeline's view of the engine: one shared client per process, and the events that come back.

This is the one place the product touches the inference client, so the runner and the API read a
small, fixed set of events whatever the engine mode (native /generate or OpenAI-compatible). The
client keeps its connections to the engine alive between generations: it is made once per engine
address and event loop (httpx connections cannot cross loops), never per answer.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.conf import settings

from inference import client as inference_client


@dataclass
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Job:
    """One request to the engine, from the web chat (an answer) or the API (no message)."""

    model: str
    rid: str
    messages: list[dict]
    max_tokens: int
    prompt_estimate: int
    node: str = ""
    #: Every turn of a conversation goes where its prefix is cached (the gateway's manual policy).
    routing_key: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None


@dataclass
class EngineEvent:
    text: str = ""
    usage: Usage | None = None
    finish_reason: str = ""


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, inference_client.SGLangClient]] = (
    weakref.WeakKeyDictionary()
)


def engine_url() -> str:
    return settings.SGLANG_URL


def make_client(url: str | None = None, *, keepalive_connections: int = 20) -> inference_client.SGLangClient:
    """A new client for the engine at `url` (default SGLANG_URL); close it when done."""
    return inference_client.SGLangClient(
        url or engine_url(), api_key=settings.SGLANG_API_KEY or None, mode=settings.SGLANG_MODE,
        behind_gateway=settings.SGLANG_BEHIND_GATEWAY, keepalive_connections=keepalive_connections,
    )


def get_client(url: str | None = None) -> inference_client.SGLangClient:
    """The running loop's shared client for the engine at `url` (default SGLANG_URL), made on first use."""
    url = url or engine_url()
    loop = asyncio.get_running_loop()
    clients = _clients.get(loop)
    if clients is None:
        clients = _clients[loop] = {}
    client = clients.get(url)
    if client is None:
        # Idle connections are kept for as many generations as a busy process runs at once.
        client = clients[url] = make_client(url, keepalive_connections=settings.ENGINE_KEEPALIVE_CONNECTIONS)
    return client


async def _cancel_on(stop: asyncio.Event, client: inference_client.SGLangClient, rid: str) -> None:
    await stop.wait()
    # Repeated, because a stop that lands before the engine has the request would otherwise be lost.
    while True:
        await client.cancel(rid)
        await asyncio.sleep(0.5)


async def stream(job: Job, stop: asyncio.Event | None = None) -> AsyncIterator[EngineEvent]:
    """The answer's events. Setting `stop` aborts the request on the engine, and the stream then ends
    with what the engine had produced and its token counts; closing the iterator early (or cancelling
    its consumer) aborts it too."""
    request = inference_client.GenerationRequest(
        messages=job.messages, model=job.model, max_new_tokens=job.max_tokens, rid=job.rid,
        temperature=job.temperature, top_p=job.top_p, stop=job.stop, seed=job.seed, routing_key=job.routing_key,
    )
    client = get_client(job.node or None)
    watcher = asyncio.get_running_loop().create_task(_cancel_on(stop, client, job.rid)) if stop else None
    try:
        async for event in client.generate_stream(request):
            yield _translate(event)
    finally:
        if watcher is not None:
            watcher.cancel()


async def complete(model: str, prompt: str, max_tokens: int) -> str:
    """One short answer to one message, for the product's own use (titles, summaries).

    On a client of its own: it runs from Celery tasks, each on a short-lived event loop.
    """
    request = inference_client.GenerationRequest(messages=[{"role": "user", "content": prompt}], model=model,
                                                 max_new_tokens=max_tokens, temperature=0.2)
    async with make_client() as client:
        parts = [event.text async for event in client.generate_stream(request)]
    return "".join(parts)


def _translate(event) -> EngineEvent:
    usage = None
    if event.usage is not None:
        usage = Usage(prompt_tokens=event.usage.prompt_tokens, cached_tokens=event.usage.cached_tokens,
                      completion_tokens=event.usage.completion_tokens)
    return EngineEvent(text=event.text or "", usage=usage, finish_reason=event.finish_reason or "")
