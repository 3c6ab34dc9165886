"""Context assembly: what the model is shown for one answer, and whether it can fit at all.

Order, always: the product's pinned prompt (CHAT_DEFAULT_SYSTEM_PROMPT: identical bytes for every
user, so SGLang's RadixAttention serves it from cache), then the user's custom instructions (the same
for every chat of theirs), then the conversation's own system prompt, each a system message of its
own; then a running summary of turns too old to fit, then the newest turns that fit the budget,
then the passages of the person's files found for this question (if the chat has files), ending with
the question being answered. The most widely shared text comes first, so each prefix is cached for as
many requests as can use it; the passages change with every question, so they come after the history,
which the next turn shares.

A question's pictures (documents.pictures) go in its own message as content parts, after its text, in
the question and in the history turns kept after it; each costs what inference.images reserves for it.

Passages and history share one budget, here: the passages may take up to RETRIEVAL_PROMPT_SHARE_PERCENT
of the room left after the system prompts and the question, best first, whole passages only; the
history has the rest and whatever the passages did not use.

The budget is the turn's context window (the smaller of the plan's and the model's) less the room
kept for a whole answer. `check_fits` is the one rule that refuses what can never fit: the web chat
asks it for the system prompt plus the new message (older turns can be dropped), the API for every
message it was sent (nothing is dropped from an API request). Who asks chooses only the refusal's
form: 413 for the web chat, OpenAI's 400 `context_length_exceeded` for a program with a key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.utils.translation import get_language_info
from django.utils.translation import gettext as _

from billing.selectors import cheapest_plan_with_bigger_window, context_window
from chat.generation.turn import TurnContext
from chat.models import Message
from config.refusals import ContextLengthExceeded, TooLarge
from config.text import grouped
from config.tokens import CHARS_PER_TOKEN, TEMPLATE_TOKENS_PER_MESSAGE, estimate_message_tokens
from documents.pictures import Attached
from documents.retrieval import Retrieved
from documents.search import Passage

SUMMARY_HEADER = "Summary of the earlier part of this conversation:\n"
PASSAGES_HEADER = (
    "Passages from the user's files that may answer the next message, numbered. Use them when they are "
    "relevant and cite each passage you use by its number in square brackets, like [1]. If they do not "
    "contain the answer, say that you did not find it in the files.\n"
)
NOTHING_FOUND = (
    "The user's files ({names}) have no passage that matches the next message. Say that you did not find "
    "it in the files; then answer from what you know, saying so."
)


@dataclass
class Prompt:
    messages: list[dict]
    estimated_tokens: int
    #: Turns left out for lack of room (the summary stands in for them).
    dropped: list[Message]
    #: The passages the prompt quotes, numbered from 1 as the model is told to cite them.
    sources: list[dict] = field(default_factory=list)
    #: It has a message about the person's files (their passages, or that none matched).
    about_files: bool = False
    #: What it held besides the question and the passages, kept with the answer (Message.prompt_frame).
    frame: dict = field(default_factory=dict)


#: A turn's pictures, by the id of its message.
Pictures = Mapping[int, Sequence[Attached]]
NO_PICTURES: Pictures = {}


def _content(text: str, pictures: Sequence[Attached]) -> str | list[dict]:
    """A message's content: its text, or (with pictures) its text then its pictures, as content parts."""
    parts = [p.part for p in pictures]
    if not any(parts):
        return text
    return [{"type": "text", "text": text}, *(part for part in parts if part)]


def message_cost(text: str, pictures: Sequence[Attached] = ()) -> int:
    return estimate_message_tokens(text) + sum(p.reserved_tokens for p in pictures)


def _label(passage: Passage) -> str:
    where = [passage.document_name]
    if passage.page:
        where.append(f"page {passage.page}")
    if passage.heading:
        where.append(passage.heading)
    return ", ".join(where)


def _passages_message(retrieved: Retrieved | None, room: int) -> tuple[dict | None, list[dict], int]:
    """The system message quoting the passages that fit in `room` tokens (best first), the sources it
    numbers, and its cost. With files but no match, a message that says so; with no files, nothing."""
    if retrieved is None or not retrieved.documents:
        return None, [], 0
    body, sources = PASSAGES_HEADER, []
    for passage in retrieved.passages:
        entry = f"\n[{len(sources) + 1}] {_label(passage)}\n{passage.text}\n"
        if estimate_message_tokens(body + entry) > room:
            break
        body += entry
        sources.append(
            {
                "n": len(sources) + 1,
                "chunk_id": passage.chunk_id,
                "document_id": passage.document_id,
                "name": passage.document_name,
                "page": passage.page,
                "heading": passage.heading,
            }
        )
    if not sources:
        names = ", ".join(d.name for d in retrieved.documents)
        body = NOTHING_FOUND.format(names=names)
    return {"role": "system", "content": body}, sources, estimate_message_tokens(body)


def check_fits(
    turn: TurnContext,
    tokens: int,
    *,
    what: str = "This message",
    param: str | None = None,
    extras: Sequence[str] = (),
) -> None:
    """Refuse a prompt of `tokens` that cannot fit the turn's window with room for an answer: TooLarge
    (413) for the web chat, in the person's language (`extras`: the system prompts that came with the
    message, "instructions" and "system prompt"); for a program (the turn has an API key)
    ContextLengthExceeded (400), in English (`what` names what it sent), its message led by OpenAI's own
    sentence ("This model's maximum context length is N tokens"), which client libraries match to raise
    their context-overflow errors."""
    if tokens <= turn.prompt_budget:
        return
    plan, window, room = turn.plan, turn.context_window, turn.max_output_tokens
    bigger = cheapest_plan_with_bigger_window(plan, turn.model)
    if turn.api_key_id is None:
        message = _too_large_for_chat(turn, tokens, extras, bigger)
        raise TooLarge(message, tokens=tokens, window=window, answer_room=room, param=param)
    message = (
        f"{what} is about {tokens:,} tokens, but the {plan.name} plan's context window on {turn.model.name} is "
        f"{window:,} tokens, {room:,} of which are kept for the answer. "
    )
    if turn.prompt_budget:
        message += (
            f"Shorten it to under {turn.prompt_budget:,} tokens "
            f"(about {turn.prompt_budget * CHARS_PER_TOKEN:,} characters)"
        )
    else:
        message += "Ask for a shorter answer"
    if turn.prompt_budget:
        message += ", ask for a shorter answer (max_tokens)"
    # The offer states the window the model holds on that plan, never the plan's bare ceiling.
    if bigger is not None:
        message += (
            f", or upgrade to {bigger.name}, whose window on {turn.model.name} is "
            f"{context_window(bigger, turn.model):,} tokens."
        )
    else:
        message += "."
    # OpenAI's wording, numbers without separators, as its clients expect (LiteLLM matches the first
    # sentence; LangChain, whose SDK's error text lacks the code, matches "prompt is too long"); then
    # the product's advice.
    openai_sentence = (
        f"This model's maximum context length is {window} tokens. However, you requested about "
        f"{tokens + room} tokens ({tokens} in the messages, {room} in the completion): the prompt is too long. "
    )
    raise ContextLengthExceeded(openai_sentence + message, tokens=tokens, window=window, answer_room=room, param=param)


def _too_large_for_chat(turn: TurnContext, tokens: int, extras: Sequence[str], bigger) -> str:
    """The web chat's refusal of a message that can never fit: two whole sentences, translated."""
    numbers = {
        "tokens": grouped(tokens),
        "plan": turn.plan.name,
        "model": turn.model.name,
        "window": grouped(turn.context_window),
        "room": grouped(turn.max_output_tokens),
        "budget": grouped(turn.prompt_budget),
        "characters": grouped(turn.prompt_budget * CHARS_PER_TOKEN),
    }
    if "instructions" in extras and "system prompt" in extras:
        size = _(
            "This message, with your custom instructions and this chat's system prompt, is about %(tokens)s "
            "tokens, but the %(plan)s plan's context window on %(model)s is %(window)s tokens, %(room)s of which "
            "are kept for the answer."
        )
    elif "instructions" in extras:
        size = _(
            "This message, with your custom instructions, is about %(tokens)s tokens, but the %(plan)s plan's "
            "context window on %(model)s is %(window)s tokens, %(room)s of which are kept for the answer."
        )
    elif "system prompt" in extras:
        size = _(
            "This message, with this chat's system prompt, is about %(tokens)s tokens, but the %(plan)s plan's "
            "context window on %(model)s is %(window)s tokens, %(room)s of which are kept for the answer."
        )
    else:
        size = _(
            "This message is about %(tokens)s tokens, but the %(plan)s plan's context window on %(model)s is "
            "%(window)s tokens, %(room)s of which are kept for the answer."
        )
    # The offer states the window the model holds on that plan, never the plan's bare ceiling.
    if bigger is not None:
        numbers.update(bigger=bigger.name, bigger_window=f"{context_window(bigger, turn.model):,}")
        if turn.prompt_budget:
            advice = _(
                "Shorten it to under %(budget)s tokens (about %(characters)s characters), or upgrade to "
                "%(bigger)s, whose window on %(model)s is %(bigger_window)s tokens."
            )
        else:
            advice = _(
                "Ask for a shorter answer, or upgrade to %(bigger)s, whose window on %(model)s is "
                "%(bigger_window)s tokens."
            )
    elif turn.prompt_budget:
        advice = _("Shorten it to under %(budget)s tokens (about %(characters)s characters).")
    else:
        advice = _("Ask for a shorter answer.")
    return f"{size % numbers} {advice % numbers}"


def _usable(message: Message) -> bool:
    return bool(message.content) and message.status not in Message.ACTIVE_STATUSES


def candidates(history: list[Message], budget: int) -> list[Message]:
    """The part of a branch whose text assembly needs: the newest turns that might fit `budget`, and
    the one before them (so a prompt that leaves turns out knows it did). `history` comes from a
    MessageTree (each message's length in `chars`, its text not loaded). A character is at least one
    byte of UTF-8, so counting characters never leaves out a turn that the exact count would keep."""
    used = 0
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.chars and message.status not in Message.ACTIVE_STATUSES:
            used += math.ceil(message.chars / CHARS_PER_TOKEN) + TEMPLATE_TOKENS_PER_MESSAGE
            if used > budget:
                return history[index:]
    return history


def _fit(
    history: list[Message], room: int, summary: str, pictures: Pictures = NO_PICTURES
) -> tuple[list[Message], list[Message], int]:
    """The newest usable turns that fit in `room` tokens (with their pictures), the older ones left out,
    and the tokens used (counting the summary when something is left out)."""
    turns = [m for m in history if _usable(m)]
    summary_cost = estimate_message_tokens(SUMMARY_HEADER + summary) if summary else 0
    kept: list[Message] = []
    used = 0
    for message in reversed(turns):
        cost = message_cost(message.content, pictures.get(message.pk, ()))
        # Room for the summary is kept once anything has to be left out.
        if used + cost + (summary_cost if len(kept) < len(turns) - 1 else 0) > room:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    dropped = turns[: len(turns) - len(kept)]
    return kept, dropped, used + (summary_cost if dropped and summary else 0)


def system_prompts(turn: TurnContext, conversation_prompt: str) -> list[str]:
    """The system prompts of a web chat answer, in order: the product's, the person's language (when it
    is not the product's own), the user's custom instructions (from the turn), the conversation's own.
    Empty ones are left out. The product's prompt stays first and the same for everyone (the engine's
    prefix cache); the language's is the same for everyone reading in that language."""
    prompts = (settings.CHAT_DEFAULT_SYSTEM_PROMPT, language_hint(turn.language), turn.custom_instructions)
    return [p for p in (*prompts, conversation_prompt) if p]


def language_hint(language: str) -> str:
    """In English, for the model: which language the person reads the product in."""
    if not language or language.split("-")[0] == settings.LANGUAGE_CODE:
        return ""
    try:
        name = get_language_info(language)["name"]
    except KeyError:
        return ""
    return (
        f"The person uses this product in {name}. Answer in the language they write in; when that is unclear "
        f"(a word, a name, code), answer in {name}."
    )


def _prompts(system: str | Sequence[str]) -> list[str]:
    return [p for p in ([system] if isinstance(system, str) else system) if p]


def system_tokens(system: str | Sequence[str]) -> int:
    return sum(estimate_message_tokens(p) for p in _prompts(system))


def assemble(
    system: str | Sequence[str],
    summary: str,
    history: list[Message],
    question: str,
    budget: int,
    retrieved: Retrieved | None = None,
    *,
    question_pictures: Sequence[Attached] = (),
    pictures: Pictures = NO_PICTURES,
    answer_so_far: str = "",
) -> Prompt:
    """The system prompts (one message each), the summary if older turns are left out, the newest
    turns that fit, the passages found in the person's files, and the question. The question is always
    included (check_fits has made sure it fits). `pictures` are the history's, by message id. With
    `answer_so_far` (an answer being continued), the prompt ends with it, as the assistant's."""
    fixed = message_cost(question, question_pictures) + system_tokens(system)
    if answer_so_far:
        fixed += estimate_message_tokens(answer_so_far)
    room = budget - fixed
    share = room * settings.RETRIEVAL_PROMPT_SHARE_PERCENT // 100
    passages, sources, quoted = _passages_message(retrieved, share)
    kept, dropped, used = _fit(history, room - quoted, summary, pictures)
    head = [{"role": "system", "content": p} for p in _prompts(system)]
    summarised = summary if dropped else ""
    frame = {"system": _prompts(system), "summary": summarised, "turns": [m.pk for m in kept]}
    if frame["summary"]:
        head.append({"role": "system", "content": SUMMARY_HEADER + summary})
    body = [{"role": m.role, "content": _content(m.content, pictures.get(m.pk, ()))} for m in kept]
    if passages is not None:
        body.append(passages)
    tail = [{"role": "user", "content": _content(question, question_pictures)}]
    if answer_so_far:
        tail.append({"role": "assistant", "content": answer_so_far})
    return Prompt(
        messages=[*head, *body, *tail],
        estimated_tokens=fixed + used + quoted,
        dropped=dropped,
        sources=sources,
        about_files=passages is not None,
        frame=frame,
    )


def left_out(system: str | Sequence[str], summary: str, history: list[Message], budget: int) -> list[Message]:
    """The turns of `history` that the next answer's prompt would leave out (what a summary must cover)."""
    return _fit(history, budget - system_tokens(system), summary)[1]


def assemble_for_turn(
    turn: TurnContext,
    *,
    system_prompt: str,
    summary: str,
    history: list[Message],
    question: str,
    retrieved: Retrieved | None = None,
    question_pictures: Sequence[Attached] = (),
    pictures: Pictures = NO_PICTURES,
    answer_so_far: str = "",
) -> Prompt:
    """The prompt of a web chat answer (`system_prompt` is the conversation's own): refused if the
    system prompts (the product's, the custom instructions, the conversation's) and the question alone
    (with its pictures) cannot fit. `answer_so_far`: the text of an answer cut at its length limit, which
    this one continues (the prompt ends with it); refused when it leaves no room to write on."""
    system = system_prompts(turn, system_prompt)
    extras = [
        name for name, text in (("instructions", turn.custom_instructions), ("system prompt", system_prompt)) if text
    ]
    needed = system_tokens(system) + message_cost(question, question_pictures)
    check_fits(turn, needed, extras=extras)
    if answer_so_far:
        _check_room_to_continue(turn, needed + estimate_message_tokens(answer_so_far))
    return assemble(
        system,
        summary,
        history,
        question,
        turn.prompt_budget,
        retrieved,
        question_pictures=question_pictures,
        pictures=pictures,
        answer_so_far=answer_so_far,
    )


def _check_room_to_continue(turn: TurnContext, tokens: int) -> None:
    """An answer is continued with its question and the system prompts in the prompt: refused (413) when
    those leave no room in the turn's window for the rest of it."""
    if tokens <= turn.prompt_budget:
        return
    message = _(
        "This answer cannot be continued: with its question it is about %(tokens)s tokens, and the %(plan)s "
        "plan's context window on %(model)s leaves %(budget)s tokens for them. Ask for what is missing in a "
        "new message."
    ) % {
        "tokens": grouped(tokens),
        "plan": turn.plan.name,
        "model": turn.model.name,
        "budget": grouped(turn.prompt_budget),
    }
    raise TooLarge(message, tokens=tokens, window=turn.context_window, answer_room=turn.max_output_tokens)
