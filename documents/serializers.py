"""Files and passages as the chat page's JSON."""

from __future__ import annotations

from django.urls import reverse

from documents.models import Chunk, Collection, Document


def document_json(document: Document) -> dict:
    return {
        "id": document.pk,
        "kind": document.kind,
        "name": document.name,
        "state": document.state,
        "state_label": document.get_state_display(),
        "in_progress": document.in_progress,
        "failure": document.failure,
        "pages": document.pages,
        "chunks_total": document.chunks_total,
        "chunks_done": document.chunks_done,
        "size_bytes": document.size_bytes,
        "conversation_id": document.conversation_id,
        "collection_id": document.collection_id,
        "created": document.created.isoformat(),
        "picture_url": picture_url(document.pk) if document.kind == Document.Kind.IMAGE else None,
    }


def picture_url(document_id: int) -> str:
    return reverse("chat:picture", args=[document_id])


def passage_json(chunk: Chunk, before: Chunk | None, after: Chunk | None) -> dict:
    return {
        "chunk_id": chunk.pk,
        "document": {"id": chunk.document_id, "name": chunk.document.name},
        "page": chunk.page,
        "heading": chunk.heading,
        "text": chunk.text,
        "before": before.text if before is not None else "",
        "after": after.text if after is not None else "",
    }


def collection_json(collection: Collection) -> dict:
    """`files` and `ready_files` when loaded by documents.collections.collections_of."""
    return {
        "id": collection.pk,
        "name": collection.name,
        "files": getattr(collection, "files", None),
        "ready_files": getattr(collection, "ready_files", None),
    }
