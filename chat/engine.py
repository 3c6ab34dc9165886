"""The runner's view of the engine: what to send for one answer, and the events that come back.

This is the one place the chat app touches the inference client, so the runner reads a small,
fixed set of events whatever the engine mode (native /generate or OpenAI-compatible).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.conf import settings

from billing import services as billing
from chat.context import prompt_for
from chat.finish import Usage
from chat.models import Message
from inference import client as inference_client


@dataclass
class Job:
    """One request to the engine, from the web chat (a message) or the API (no message)."""

    user_id: int
    model: str
    rid: str
    messages: list[dict]
    max_tokens: int
    prompt_estimate: int
    node: str = ""
    message_id: int | None = None
    conversation_id: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None


@dataclass
class EngineEvent:
    text: str = ""
    usage: Usage | None = None
    finish_reason: str = ""


def prepare(message_id: int) -> Job | None:
    """Assemble the prompt for a pending answer (None if it was deleted meanwhile)."""
    message = Message.objects.select_related("conversation__owner").filter(pk=message_id).first()
    if message is None:
        return None
    owner = message.conversation.owner
    plan = billing.effective_plan(owner)
    prompt = prompt_for(message, plan)
    if prompt.dropped:
        from chat.tasks import summarize_conversation

        summarize_conversation.delay(message.conversation_id)
    return Job(
        message_id=message.pk, user_id=owner.pk, conversation_id=message.conversation_id, model=message.model,
        rid=message.request_id, messages=prompt.messages, max_tokens=plan.max_output_tokens,
        prompt_estimate=prompt.estimated_tokens, node=settings.SGLANG_URL,
    )


def make_client() -> inference_client.SGLangClient:
    return inference_client.SGLangClient(
        settings.SGLANG_URL, api_key=settings.SGLANG_API_KEY or None, mode=settings.SGLANG_MODE,
        behind_gateway=settings.SGLANG_BEHIND_GATEWAY,
    )


async def _cancel_on(stop: asyncio.Event, client, rid: str) -> None:
    await stop.wait()
    # Repeated, because a stop that lands before the engine has the request would otherwise be lost.
    while True:
        await client.cancel(rid)
        await asyncio.sleep(0.5)


async def stream(job: Job, stop: asyncio.Event | None = None) -> AsyncIterator[EngineEvent]:
    """The answer's events. Setting `stop` aborts the request on the engine, and the stream then ends
    with what the engine had produced and its token counts; cancelling the consumer aborts it too."""
    request = inference_client.GenerationRequest(
        messages=job.messages, model=job.model, max_new_tokens=job.max_tokens, rid=job.rid,
        temperature=job.temperature, top_p=job.top_p, stop=job.stop, seed=job.seed,
        # Every turn of a conversation goes where its prefix is cached (the gateway's manual policy).
        routing_key=str(job.conversation_id) if job.conversation_id is not None else None,
    )
    async with make_client() as client:
        watcher = asyncio.get_running_loop().create_task(_cancel_on(stop, client, job.rid)) if stop else None
        try:
            async for event in client.generate_stream(request):
                yield _translate(event)
        finally:
            if watcher is not None:
                watcher.cancel()


def _translate(event) -> EngineEvent:
    usage = None
    if event.usage is not None:
        usage = Usage(prompt_tokens=event.usage.prompt_tokens, cached_tokens=event.usage.cached_tokens,
                      completion_tokens=event.usage.completion_tokens)
    return EngineEvent(text=event.text or "", usage=usage, finish_reason=event.finish_reason or "")
