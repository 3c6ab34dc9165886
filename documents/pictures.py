"""The pictures a question carries, read back from storage for the prompt of an answer.

A picture is a document of kind image (documents.services.upload_document checked it on the way in);
a message lists the ids of its own (chat.Message.images). Reading it again here gives the content part
sent to the engine and the tokens its prompt is reserved for (inference.images). A picture deleted
since, or one that no longer reads, is left out: the text of the turn stays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from documents.models import Document
from inference import images


@dataclass(frozen=True)
class Attached:
    document_id: int
    name: str
    picture: images.Picture
    #: The content part for the engine (a data: URL of the picture).
    part: dict

    @property
    def reserved_tokens(self) -> int:
        return self.picture.reserved_tokens


def pictures(owner_id: int, document_ids: Iterable[int]) -> dict[int, Attached]:
    """The owner's pictures among `document_ids`, read, by id (others' and missing ones are absent)."""
    ids = {int(i) for i in document_ids}
    if not ids:
        return {}
    found: dict[int, Attached] = {}
    for document in Document.objects.filter(owner_id=owner_id, pk__in=ids, kind=Document.Kind.IMAGE):
        try:
            with document.file.open("rb") as stored:
                data = stored.read()
        except OSError:
            continue  # the stored file is gone: the turn goes on without it
        picture = images.picture_of(data)
        if picture is not None:
            found[document.pk] = Attached(document.pk, document.name, picture, images.image_part(picture, data))
    return found
