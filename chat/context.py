"""Context assembly: what the model is shown for one answer.

Order, always: the conversation's system prompt (identical bytes for everyone who uses it, so
SGLang's RadixAttention serves it from cache), then a running summary of turns too old to fit, then
the newest turns that fit the budget. The budget is the smaller of the plan's and the model's
context, less the room kept for the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from chat import selectors
from chat.models import Conversation, Message
from chat.tokens import estimate_message_tokens
from inference.catalogue import get_model

SUMMARY_HEADER = "Summary of the earlier part of this conversation:\n"


@dataclass
class Prompt:
    messages: list[dict]
    estimated_tokens: int
    #: Turns left out for lack of room (the summary stands in for them).
    dropped: list[Message]


def context_budget(plan, model_id: str) -> int:
    model = get_model(model_id)
    window = min(plan.max_context_tokens, model.context_tokens if model else plan.max_context_tokens)
    return max(window - plan.max_output_tokens, 256)


def _usable(message: Message) -> bool:
    return bool(message.content) and message.status not in Message.ACTIVE_STATUSES


def assemble(conversation: Conversation, history: list[Message], budget: int) -> Prompt:
    """The system prompt, the summary if older turns are dropped, and the newest turns that fit."""
    head = []
    used = 0
    if conversation.system_prompt:
        head.append({"role": "system", "content": conversation.system_prompt})
        used += estimate_message_tokens(conversation.system_prompt)

    turns = [m for m in history if _usable(m)]
    kept: list[Message] = []
    summary_cost = estimate_message_tokens(SUMMARY_HEADER + conversation.summary) if conversation.summary else 0
    for message in reversed(turns):
        cost = estimate_message_tokens(message.content)
        # Room for the summary is kept once anything has to be dropped.
        if used + cost + (summary_cost if len(kept) < len(turns) - 1 else 0) > budget and kept:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    dropped = turns[: len(turns) - len(kept)]

    if dropped and conversation.summary:
        head.append({"role": "system", "content": SUMMARY_HEADER + conversation.summary})
        used += summary_cost
    body = [{"role": m.role, "content": m.content} for m in kept]
    return Prompt(messages=head + body, estimated_tokens=used, dropped=dropped)


def prompt_for(assistant: Message, plan) -> Prompt:
    """The prompt that produces `assistant`: everything on its branch before it."""
    history = selectors.history_before(assistant)
    return assemble(assistant.conversation, history, context_budget(plan, assistant.model))


def estimate_prompt_tokens(history: list[Message], new_text: str, *, plan, model: str, system_prompt: str) -> int:
    """Prompt size for the quota reservation, before anything is saved."""
    turns = sum(estimate_message_tokens(m.content) for m in history if _usable(m)) + estimate_message_tokens(new_text)
    return min(turns, context_budget(plan, model)) + estimate_message_tokens(system_prompt)
