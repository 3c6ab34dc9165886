"""Conversation titles and summaries: the product's own work, written by the model through the same
driver as every answer (`chat.generation.completion.start_internal`): admitted at the lowest
priority, priced in the metrics, billed to nobody."""

from __future__ import annotations

import asyncio

from channels.db import database_sync_to_async
from django import db
from django.db import transaction
from django.utils import translation
from django.utils.translation import gettext_lazy

from accounts.models import User
from accounts.preferences import own_language
from chat.generation import completion, engine, run
from chat.generation.assemble import SUMMARY_HEADER, left_out, system_prompts
from chat.generation.notify import announce_conversation
from chat.generation.settle import COMPLETED
from chat.generation.turn import SUMMARY, TITLE, TurnContext
from chat.models import Conversation, Message
from chat.selectors import branch
from config import redis
from inference.errors import EngineError

TITLE_PROMPT = (
    "Write a title of at most six words for a conversation that starts with the message below. "
    "Answer with the title only, no quotes.\n\n"
)
SUMMARY_PROMPT = (
    "Summarize the conversation below in at most 200 words, keeping names, numbers, decisions and "
    "open questions. Answer with the summary only.\n\n"
)


#: The title of a chat whose first question staff removed (review.services.hide_message): it says what
#: the page shows in that message's place ("This message was removed."), never the removed words.
#: Saved in the owner's own language (Settings), or in English if they left it to their browser's.
REMOVED_TITLE = gettext_lazy("Removed message")


def fallback_title(text: str) -> str:
    words = text.split()
    return " ".join(words[:8]) + ("…" if len(words) > 8 else "")


def tidy_title(text: str) -> str:
    """The model's title, trimmed: models do not always keep to the six words they were asked for."""
    words = text.strip().strip("\"'`*#").split()
    return " ".join(words[:8]).rstrip(".,;:")[:80]


async def _write(user: User, model: str, prompt: str, max_tokens: int, purpose: str) -> str:
    # Not on the thread that thread-sensitive calls share: every answer's final write queues there.
    generation = await database_sync_to_async(completion.start_internal, thread_sensitive=False)(
        user, model, prompt, max_tokens=max_tokens, purpose=purpose
    )
    try:
        ending = await run.run(generation)
    finally:
        # This loop is the task's own and ends with it: its engine and Redis connections go too.
        await engine.close_clients()
        await redis.close_async_clients()
    if ending.status != COMPLETED:
        raise EngineError(ending.error or f"the {purpose} was not written ({ending.status})")
    return ending.text


def complete(user: User, model: str, prompt: str, max_tokens: int, *, purpose: str) -> str:
    """The product's own short completion for `user`'s conversation, from synchronous code (a Celery
    task), on an event loop of its own. Raises a Refusal (the engines are too busy for it, the user may
    no longer use the model) or an EngineError.

    The calling thread's database connections go back to the pool first: the generation can take
    seconds, and a thread that kept its connection meanwhile would hold it out of a small pool."""
    db.connections.close_all()
    return asyncio.run(_write(user, model, prompt, max_tokens, purpose))


def title_conversation(conversation_id: int, *, ask_model: bool = True) -> str | None:
    conversation = Conversation.objects.select_related("owner").filter(pk=conversation_id).first()
    if conversation is None or conversation.title:
        return None
    first = conversation.messages.filter(role=Message.Role.USER).order_by("created").first()
    if first is None:
        return None
    removed = first.status == Message.Status.BLOCKED  # its text is staff's alone now: no title repeats it
    # A readable title at once; the model's better one replaces it when it arrives.
    if removed:
        with translation.override(own_language(conversation.owner)):
            fallback = str(REMOVED_TITLE)
    else:
        fallback = fallback_title(first.content)
    Conversation.objects.filter(pk=conversation_id, title="").update(title=fallback)
    if not ask_model or removed:
        announce_conversation(Conversation.objects.get(pk=conversation_id))
        return fallback
    title = tidy_title(
        complete(conversation.owner, conversation.model, TITLE_PROMPT + first.content[:2000], 24, purpose=TITLE)
    )
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
    summary = complete(
        conversation.owner, conversation.model, SUMMARY_PROMPT + transcript[-24000:], 300, purpose=SUMMARY
    ).strip()
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk).update(summary=summary, summary_through=newest_dropped)
    return summary
