"""Conversation titles and summaries, written by the model through the inference client."""

from __future__ import annotations

import asyncio

from django.db import transaction

from chat.generation import engine
from chat.generation.assemble import SUMMARY_HEADER, left_out, system_prompts
from chat.generation.notify import announce_conversation
from chat.generation.turn import TurnContext
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


def complete(model: str, prompt: str, max_tokens: int) -> str:
    """One short completion, from synchronous code (a Celery task)."""
    return asyncio.run(engine.complete(model, prompt, max_tokens))


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
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is not None:
        announce_conversation(conversation)
    return title


def summarize(conversation: Conversation, turn: TurnContext) -> str | None:
    """Refresh the running summary so it covers every turn the next prompt leaves out."""
    history = [m for m in branch(conversation) if not m.is_active]
    dropped = left_out(
        system_prompts(turn, conversation.system_prompt), conversation.summary, history, turn.prompt_budget
    )
    if not dropped:
        return None
    newest_dropped = dropped[-1]
    if conversation.summary_through_id == newest_dropped.pk:
        return conversation.summary
    transcript = "\n\n".join(f"{m.role}: {m.content}" for m in dropped)
    if conversation.summary:
        transcript = SUMMARY_HEADER + conversation.summary + "\n\n" + transcript
    summary = complete(conversation.model, SUMMARY_PROMPT + transcript[-24000:], 300).strip()
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk).update(summary=summary, summary_through=newest_dropped)
    return summary
