"""Reads for shared links: the owner's view of their links, and the public page of one link."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, QuerySet
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.models import User
from accounts.standing import account_refusal
from chat import selectors as chat_selectors
from chat.models import Conversation, Message, SharedConversation
from config.refusals import NotFound
from documents import selectors as documents_selectors

#: Answers a shared page shows: finished ones the owner saw as answers. Pending and streaming text is
#: unfinished; blocked answers are withheld by the content policy; failed and interrupted ones are not answers.
SHOWN_ANSWER_STATUSES = frozenset({Message.Status.COMPLETED, Message.Status.STOPPED})

#: Said the same way for an unknown, revoked or taken-down link, so a visitor learns nothing about which.
GONE = gettext_lazy("This link does not work. Its owner may have revoked it, or it was taken down.")


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
class SharedSource:
    """A source an answer cites, as the public page shows it."""

    n: int
    name: str
    page: int | None
    #: The passage of the owner's file that the answer quoted, only if the owner chose to show passages and
    #: it still exists; None otherwise.
    passage: str | None = None
    #: The owner chose to show passages, but this one is gone (its file was deleted).
    gone: bool = False


@dataclass(frozen=True)
class SharedMessage:
    role: str
    content: str
    status: str
    sources: list[SharedSource]


@dataclass(frozen=True)
class SharedPage:
    """What the public page of a link shows, and nothing more."""

    title: str
    owner_name: str  # empty unless the owner chose to show their display name
    mode: str
    as_of: datetime  # when the snapshot was taken, or when a live conversation last changed
    model: str
    messages: list[SharedMessage]
    show_passages: bool  # the owner chose to show the passages the answers quoted


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
        title=conversation.title or _("Shared conversation"),
        owner_name=owner.display_name.strip() if share.show_owner_name else "",
        mode=share.mode,
        as_of=as_of,
        model=conversation.model,
        messages=_shared_messages([m for m in messages if is_shown(m)], owner.pk, show_passages=share.show_passages),
        show_passages=share.show_passages,
    )


def _shared_messages(messages: list[Message], owner_id: int, *, show_passages: bool) -> list[SharedMessage]:
    """The messages as the page shows them. With the owner's choice, each source carries the text it quoted,
    read for the whole page in one query, and only from the owner's own files (a source names its passage by
    id, and the page is public: a passage of anyone else's, or of another of the owner's files than the one
    the source names, is never shown)."""
    passages: dict[int, tuple[int, str]] = {}
    if show_passages:
        passages = documents_selectors.passage_texts(owner_id, (c for m in messages for c in _chunk_ids(m.sources)))
    shown = []
    for message in messages:
        sources = []
        for source in _sources(message.sources):
            passage = None
            if show_passages:
                found = passages.get(_chunk_id(source))
                if found is not None and found[0] == source.get("document_id"):
                    passage = found[1]
            sources.append(
                SharedSource(
                    n=source.get("n"),
                    name=source.get("name", ""),
                    page=source.get("page"),
                    passage=passage,
                    gone=show_passages and passage is None,
                )
            )
        shown.append(SharedMessage(role=message.role, content=message.content, status=message.status, sources=sources))
    return shown


def _sources(sources: object) -> list[dict]:
    # chat.generation stores a list of dicts; anything else cites nothing the page can show.
    return [s for s in sources if isinstance(s, dict)] if isinstance(sources, list) else []


def _chunk_ids(sources: object) -> list[int]:
    return [c for c in map(_chunk_id, _sources(sources)) if c is not None]


def _chunk_id(source: dict) -> int | None:
    # Stored by chat.generation as an int; anything else names no passage.
    chunk_id = source.get("chunk_id")
    return chunk_id if isinstance(chunk_id, int) and not isinstance(chunk_id, bool) else None


def is_shown(message: Message) -> bool:
    if message.role == Message.Role.USER:
        return message.status != Message.Status.BLOCKED  # hidden by moderators
    return message.status in SHOWN_ANSWER_STATUSES
