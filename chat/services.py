"""Writes to conversations outside the path of an answer: create, rename, pin, archive, set the
conversation's own system prompt, delete.

Sending, regenerating, editing and stopping are chat.generation's (the path of one answer).
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext as _

from accounts.models import User
from accounts.standing import check_account
from billing import services as billing
from chat import selectors
from chat.generation.notify import announce_conversation
from chat.generation.turn import resolve_turn
from chat.models import Conversation
from config.refusals import BadInput, TooLarge
from config.text import grouped
from documents.services import use_in_conversation

TITLE_MAX = 200


def create_conversation(
    user: User, *, title: str = "", model: str | None = None, system_prompt: str | None = None
) -> Conversation:
    """An empty chat (scripts; the page starts one with its first message, chat.generation.start).
    Counted against the plan's new chats a day, after the request is known to be valid."""
    check_account(user)
    turn = resolve_turn(user, model)
    title = _clean_title(title)
    system_prompt = "" if system_prompt is None else _clean_system_prompt(system_prompt)
    billing.count_new_chat(user, turn.plan)
    return Conversation.objects.create(owner=user, title=title, model=turn.model.id, system_prompt=system_prompt)


def update_conversation(user: User, conversation_id: int, changes: dict) -> Conversation:
    conversation = selectors.get_conversation(user, conversation_id)
    unknown = set(changes) - {"title", "pinned", "archived", "model", "system_prompt", "collection_ids"}
    if unknown:
        raise BadInput(f"These fields cannot be changed: {', '.join(sorted(unknown))}.")
    if "title" in changes:
        conversation.title = _clean_title(changes["title"])
    for flag in ("pinned", "archived"):
        if flag in changes:
            if not isinstance(changes[flag], bool):
                raise BadInput(f"{flag} must be true or false.")
            setattr(conversation, flag, changes[flag])
    if "system_prompt" in changes:
        # The next answer's prompt reads it (chat.generation.assemble); answers already given keep theirs.
        conversation.system_prompt = _clean_system_prompt(changes["system_prompt"])
    if "model" in changes:
        conversation.model = resolve_turn(user, changes["model"] or None).model.id
    if "collection_ids" in changes:
        # The next answer reads these collections' files (documents.retrieval); earlier answers keep their sources.
        use_in_conversation(user, conversation, changes["collection_ids"])
    conversation.save()
    transaction.on_commit(lambda: announce_conversation(conversation))
    return conversation


def delete_conversation(user: User, conversation_id: int) -> None:
    selectors.get_conversation(user, conversation_id).delete()


def _clean_system_prompt(prompt: object) -> str:
    """The conversation's own system prompt: added after the product's prompt and the owner's custom
    instructions, never in place of them."""
    if not isinstance(prompt, str):
        raise BadInput("The system prompt must be text.", param="system_prompt")
    prompt = prompt.strip().replace("\r\n", "\n")
    limit = settings.CHAT_MAX_SYSTEM_PROMPT_CHARS
    if len(prompt) > limit:
        raise TooLarge(
            _("The system prompt is %(length)s characters long; the limit is %(limit)s. Shorten it.")
            % {"length": grouped(len(prompt)), "limit": grouped(limit)},
            param="system_prompt",
        )
    return prompt


def _clean_title(title: object) -> str:
    if not isinstance(title, str):
        raise BadInput("The title must be text.")
    return " ".join(title.split())[:TITLE_MAX]
