"""Reads for shared links: the owner's view of their links, and the public page of one link."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, QuerySet

from accounts.models import User
from accounts.standing import account_refusal
from chat import selectors as chat_selectors
from chat.models import Conversation, Message, SharedConversation
from config.refusals import NotFound

#: Answers a shared page shows: finished ones the owner saw as answers. Pending and streaming text is
#: unfinished; blocked answers are withheld by the content policy; failed and interrupted ones are not answers.
SHOWN_ANSWER_STATUSES = frozenset({Message.Status.COMPLETED, Message.Status.STOPPED})

#: Said the same way for an unknown, revoked or taken-down link, so a visitor learns nothing about which.
GONE = "This link does not work. Its owner may have revoked it, or it was taken down."


def active_share(conversation: Conversation) -> SharedConversation | None:
    return conversation.shares.filter(revoked_at__isnull=True, taken_down_at__isnull=True).first()


def taken_down_share(conversation: Conversation) -> SharedConversation | None:
    return conversation.shares.filter(taken_down_at__isnull=False).order_by("-taken_down_at").first()


def conversation_share(user: User, conversation_id: int) -> SharedConversation | None:
    """The working link of one of the user's conversations (404 for anyone else's conversation)."""
    return active_share(chat_selectors.get_conversation(user, conversation_id))


def shares_for(user: User) -> QuerySet[SharedConversation]:
    """Every link the user made, working ones first, then newest."""
    return (
        SharedConversation.objects.filter(conversation__owner=user)
        .select_related("conversation")
        .order_by(F("taken_down_at").asc(nulls_first=True), F("revoked_at").asc(nulls_first=True), "-created")
    )


@dataclass(frozen=True)
class SharedPage:
    """What the public page of a link shows, and nothing more."""

    title: str
    owner_name: str  # empty unless the owner chose to show their display name
    mode: str
    as_of: datetime  # when the snapshot was taken, or when a live conversation last changed
    model: str
    messages: list[Message]


def shared_page(token: str) -> SharedPage:
    share = (
        SharedConversation.objects.select_related("conversation__owner")
        .filter(token=token, revoked_at__isnull=True, taken_down_at__isnull=True)
        .first()
    )
    if share is None:
        raise NotFound(GONE)
    conversation = share.conversation
    owner = conversation.owner
    # A suspended or closed account's links stop working with it.
    if account_refusal(owner) is not None:
        raise NotFound(GONE)
    if share.mode == SharedConversation.Mode.LIVE:
        messages = chat_selectors.branch(conversation)
        as_of = conversation.updated
    else:
        position = {message_id: n for n, message_id in enumerate(share.message_ids)}
        found = Message.objects.filter(conversation=conversation, pk__in=share.message_ids)
        messages = sorted(found, key=lambda m: position[m.pk])
        as_of = share.updated
    return SharedPage(
        title=conversation.title or "Shared conversation",
        owner_name=owner.display_name.strip() if share.show_owner_name else "",
        mode=share.mode,
        as_of=as_of,
        model=conversation.model,
        messages=[m for m in messages if is_shown(m)],
    )


def is_shown(message: Message) -> bool:
    if message.role == Message.Role.USER:
        return message.status != Message.Status.BLOCKED  # hidden by moderators
    return message.status in SHOWN_ANSWER_STATUSES
