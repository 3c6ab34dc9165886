"""Conversation titles and summaries, written by the model through the inference client."""

from __future__ import annotations

import asyncio

from django.db import transaction

from chat.context import SUMMARY_HEADER, assemble, context_budget
from chat.models import Conversation, Message
from chat.selectors import branch

TITLE_PROMPT = (
    "Write a title of at most six words for a conversation that starts with the message below. "
    "Answer with the title only, no quotes.\n\n"
)
SUMMARY_PROMPT = (
    "Summarize the conversation below in at most 200 words, keeping names, numbers, decisions and "
    "open questions. Answer with the summary only.\n\n"
)


def fallback_title(text: str) -> str:
    words = text.split()
    return " ".join(words[:8]) + ("…" if len(words) > 8 else "")


def tidy_title(text: str) -> str:
    """The model's title, trimmed: models do not always keep to the six words they were asked for."""
    words = text.strip().strip("\"'`*#").split()
    return " ".join(words[:8]).rstrip(".,;:")[:80]


async def _complete(model: str, prompt: str, max_tokens: int) -> str:
    from chat.engine import make_client
    from inference.client import GenerationRequest

    request = GenerationRequest(messages=[{"role": "user", "content": prompt}], model=model,
                                max_new_tokens=max_tokens, temperature=0.2)
    parts = []
    async with make_client() as client:
        async for event in client.generate_stream(request):
            parts.append(event.text)
    return "".join(parts)


def complete(model: str, prompt: str, max_tokens: int) -> str:
    """One short completion, from synchronous code (a Celery task)."""
    return asyncio.run(_complete(model, prompt, max_tokens))


def title_conversation(conversation_id: int) -> str | None:
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None or conversation.title:
        return None
    first = conversation.messages.filter(role=Message.Role.USER).order_by("created").first()
    if first is None:
        return None
    # A readable title at once; the model's better one replaces it when it arrives.
    Conversation.objects.filter(pk=conversation_id, title="").update(title=fallback_title(first.content))
    title = tidy_title(complete(conversation.model, TITLE_PROMPT + first.content[:2000], 24))
    # An engine that echoes (the simulator's --echo) answers with the instruction itself.
    if title and not TITLE_PROMPT.startswith(title.rstrip("…")):
        Conversation.objects.filter(pk=conversation_id).update(title=title)
    announce_conversation(conversation_id)
    return title


def announce_conversation(conversation_id: int) -> None:
    """Tell every open tab of the owner that a conversation changed (title, pin, archive)."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from chat.finish import user_group
    from chat.serializers import conversation_json

    conversation = Conversation.objects.filter(pk=conversation_id).first()
    layer = get_channel_layer()
    if conversation is not None and layer is not None:
        async_to_sync(layer.group_send)(user_group(conversation.owner_id), {
            "type": "chat.conversation", "conversation": conversation_json(conversation),
        })


def summarize(conversation_id: int, plan) -> str | None:
    """Refresh the running summary so it covers every turn the context budget drops."""
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None:
        return None
    history = [m for m in branch(conversation) if not m.is_active]
    prompt = assemble(conversation, history, context_budget(plan, conversation.model))
    if not prompt.dropped:
        return None
    newest_dropped = prompt.dropped[-1]
    if conversation.summary_through_id == newest_dropped.pk:
        return conversation.summary
    transcript = "\n\n".join(f"{m.role}: {m.content}" for m in prompt.dropped)
    if conversation.summary:
        transcript = SUMMARY_HEADER + conversation.summary + "\n\n" + transcript
    summary = complete(conversation.model, SUMMARY_PROMPT + transcript[-24000:], 300).strip()
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation_id).update(summary=summary, summary_through=newest_dropped)
    return summary
