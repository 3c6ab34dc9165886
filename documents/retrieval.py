"""Retrieval on the path of one message: which of a person's files an answer may read, and the
passages of them that match the question.

The files an answer reads are the conversation's own attachments and those sent with the message
(uploaded in the composer before the chat existed), the owner's only, and only once they are ready.
The question is searched together with the previous question of the conversation: a follow-up ("and
the second one?") names little by itself, and the turn before it says what it is about. The search is
one hybrid query over all those files at once (documents.search: the global top-k, not k per file);
when the question cannot be embedded (the embedding model down or not configured), full text alone.

What the passages cost in the prompt, and how many fit, is decided by chat.generation.assemble, the
same function that budgets the history.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q

from documents import search
from documents.embedding import EmbeddingUnavailable, embed_texts
from documents.models import Chunk, Document
from documents.search import Passage
from inference.errors import EngineError

log = logging.getLogger(__name__)

#: Passages asked of the index; the prompt's budget may keep fewer.
TOP_K = 8


@dataclass(frozen=True)
class Retrieved:
    #: The files searched (their names go in the prompt when nothing matched).
    documents: list[Document]
    #: Best first.
    passages: list[Passage]


def readable_documents(
    owner_id: int,
    *,
    conversation_id: int | None,
    document_ids: Iterable[int] = (),
    collection_ids: Iterable[int] = (),
) -> list[Document]:
    """The ready files an answer in this conversation may read: the conversation's, those of the
    collections it uses, and the ones (and the collections) sent with the message; the owner's only.
    Pictures are not read (they go to the model with their message)."""
    which = Q(pk__in=[int(i) for i in document_ids]) | Q(collection_id__in=[int(i) for i in collection_ids])
    if conversation_id is not None:
        which |= Q(conversation_id=conversation_id) | Q(collection__conversations=conversation_id)
    found = Document.objects.filter(which, owner_id=owner_id, state=Document.State.READY, kind=Document.Kind.TEXT)
    return list(found.distinct().order_by("created"))


def search_text(question: str, previous_question: str = "") -> str:
    """What is searched for: the question, after the conversation's previous question (a follow-up
    relies on it for what it is about)."""
    return f"{previous_question}\n{question}" if previous_question else question


def retrieve(owner_id: int, documents: list[Document], question: str, previous_question: str = "") -> Retrieved:
    """The passages of `documents` that best match the question (none when there are no documents)."""
    if not documents:
        return Retrieved(documents=[], passages=[])
    text = search_text(question, previous_question)
    try:
        vector = embed_texts([text]).vectors[0]
    except (EmbeddingUnavailable, EngineError) as exc:
        # The answer goes on with what full text finds: a chat with files must not stop answering
        # because the embedding model is down (or gone from the configuration).
        log.warning("The question could not be embedded (%s); searching the files by their words only.", exc)
        vector = None
    passages = search.search(owner_id, [d.pk for d in documents], text, vector, TOP_K)
    return Retrieved(documents=documents, passages=passages)


def passage_for(owner_id: int, chunk_id: int) -> tuple[Chunk, Chunk | None, Chunk | None]:
    """A cited passage with the ones before and after it on the same page (the panel says which page),
    for the side panel: the owner's only (Chunk.DoesNotExist otherwise)."""
    chunk = Chunk.objects.select_related("document").get(pk=chunk_id, owner_id=owner_id)
    around = {
        c.ordinal: c
        for c in Chunk.objects.filter(
            document_id=chunk.document_id, page=chunk.page, ordinal__in=[chunk.ordinal - 1, chunk.ordinal + 1]
        )
    }
    return chunk, around.get(chunk.ordinal - 1), around.get(chunk.ordinal + 1)
