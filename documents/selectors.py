"""Reading a person's files: lists for the pages, one file by id (never another person's), and the
figures the plan limits count."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q, QuerySet, Sum
from django.utils.translation import gettext as _

from config.refusals import NotFound
from documents.models import Chunk, Collection, Document, PagesRead


def documents_of(user, *, conversation_id: int | None = None, collection_id: int | None = None) -> QuerySet[Document]:
    """The person's files, newest first; only a conversation's or a collection's when one is given."""
    documents = Document.objects.filter(owner=user)
    if conversation_id is not None:
        documents = documents.filter(conversation_id=conversation_id)
    if collection_id is not None:
        documents = documents.filter(collection_id=collection_id)
    return documents


def files_of_conversation(conversation) -> QuerySet[Document]:
    """The files a conversation's answers read, oldest first (its pictures go with their messages)."""
    return Document.objects.filter(conversation=conversation, kind=Document.Kind.TEXT).order_by("created")


def pending_uploads(user) -> QuerySet[Document]:
    """Files uploaded in the composer before their chat exists (neither in a chat nor in a collection)."""
    return Document.objects.filter(owner=user, conversation__isnull=True, collection__isnull=True)


def document_for(user, document_id: int) -> Document:
    """The person's file `document_id`; NotFound (404) for anyone else's, as for one that does not exist."""
    document = Document.objects.filter(owner=user, pk=document_id).first()
    if document is None:
        raise NotFound(_("There is no such file."))
    return document


def picture_for(user, document_id: int) -> Document:
    """One of the person's pictures, or 404 (another person's, a file that is not a picture, none)."""
    found = Document.objects.filter(owner=user, pk=document_id, kind=Document.Kind.IMAGE).first()
    if found is None:
        raise NotFound(_("There is no such picture."))
    return found


def passage_texts(owner_id: int, chunk_ids: Iterable[int]) -> dict[int, tuple[int, str]]:
    """The text of each of the passages `chunk_ids` that still exist and are `owner_id`'s, by id, with the
    file each is in: `{chunk_id: (document_id, text)}`, in one query. Anyone else's, and those of deleted
    files, are simply absent."""
    rows = Chunk.objects.filter(owner_id=owner_id, pk__in=set(chunk_ids)).values_list("pk", "document_id", "text")
    return {pk: (document_id, text) for pk, document_id, text in rows}


def collections_of(user) -> QuerySet[Collection]:
    """The person's collections by name, each with `files` (how many), `ready_files` (read and indexed)
    and `size_bytes` (their total)."""
    return Collection.objects.filter(owner=user).annotate(
        files=Count("documents"),
        ready_files=Count("documents", filter=Q(documents__state=Document.State.READY)),
        size_bytes=Sum("documents__size_bytes"),
    )


def collection_for(user, collection_id: int) -> Collection:
    collection = Collection.objects.filter(owner=user, pk=collection_id).first()
    if collection is None:
        raise NotFound(_("There is no such collection."))
    return collection


def stored_bytes(user) -> int:
    """The size of every file the person keeps (what the plan's storage counts)."""
    return Document.objects.filter(owner=user).aggregate(total=Sum("size_bytes"))["total"] or 0


def pages_read(user_id: int, start: datetime, end: datetime) -> int:
    """Pages read from the person's files between `start` and `end` (a billing period)."""
    rows = PagesRead.objects.filter(owner_id=user_id, created__gte=start, created__lt=end)
    return rows.aggregate(total=Sum("pages"))["total"] or 0


@dataclass(frozen=True)
class Progress:
    """What the page shows of one file while it is read, and after."""

    state: str
    #: The state in words ("Reading", "Indexing", "Failed", ...).
    label: str
    chunks_done: int
    chunks_total: int
    #: 0-100 while passages are embedded; None before their number is known.
    percent: int | None
    in_progress: bool
    #: Why it failed, a sentence for its owner; empty otherwise.
    failure: str


def progress(document: Document) -> Progress:
    total, done = document.chunks_total, document.chunks_done
    percent = None
    if document.state == Document.State.READY:
        percent = 100
    elif total:
        percent = min(100, round(100 * done / total))
    return Progress(
        state=document.state,
        label=Document.State(document.state).label,
        chunks_done=done,
        chunks_total=total,
        percent=percent,
        in_progress=document.in_progress,
        failure=document.failure,
    )
