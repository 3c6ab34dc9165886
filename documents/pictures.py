"""The pictures a question carries, for the prompt of an answer.

A picture is a document of kind image (documents.services.upload_document checked it on the way in and
kept its size); a message lists the ids of its own (chat.Message.images). What a prompt reserves for
one is reckoned from its size alone (inference.images), so deciding which turns fit reads no file; the
bytes are read from storage only for the pictures a prompt keeps, when its content part is built. A
picture deleted since is left out; one whose stored file is gone gives no part (its turn's text stays).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from documents.models import Document
from inference import images


class Attached:
    """One of the owner's pictures, by its document: its size now, its bytes when a prompt needs them."""

    def __init__(self, document: Document) -> None:
        self.document = document
        self.picture = images.Picture(document.content_type, document.width or 0, document.height or 0, 0)

    @property
    def document_id(self) -> int:
        return self.document.pk

    @property
    def reserved_tokens(self) -> int:
        return self.picture.reserved_tokens

    @functools.cached_property
    def part(self) -> dict | None:
        """The content part for the engine (a data: URL of the picture), or None when its file is gone."""
        try:
            with self.document.file.open("rb") as stored:
                data = stored.read()
        except OSError:
            return None
        picture = images.picture_of(data)
        return images.image_part(picture, data) if picture is not None else None


def pictures(owner_id: int, document_ids: Iterable[int]) -> dict[int, Attached]:
    """The owner's pictures among `document_ids`, by id (others' and missing ones are absent), in one
    query and without reading a file."""
    ids = {int(i) for i in document_ids}
    if not ids:
        return {}
    found = Document.objects.filter(owner_id=owner_id, pk__in=ids, kind=Document.Kind.IMAGE)
    return {document.pk: Attached(document) for document in found}
