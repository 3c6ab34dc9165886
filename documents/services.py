"""Changing a person's files: upload, cancel a read, delete, rename, attach uploads to a chat, and
collections. Views call these and decide nothing; every refusal is a sentence with a status.

A file is checked before anything is stored: its type (400, naming the types that can be read), then
the plan's largest file, files per collection and storage (413, naming the limit and the plan that
allows more; billing.services.files decides). It is saved to the default storage, its row created in
`queued`, and its reading starts once the row is committed (documents.runner). A picture (by its name:
PNG, JPEG, WebP, GIF) is checked as a picture instead (the plan must send images: 403; at most the size
an engine is sent: 413; its bytes must read as one: 400) and kept `ready`, with nothing to read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import PurePath

from django.conf import settings
from django.core.files.base import File
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from accounts.models import User
from billing import services as billing
from billing.services.files import in_bytes
from config.refusals import BadInput, NotAllowed, NotFound, TooLarge
from documents import runner, selectors
from documents.extract import kind_of, unsupported_sentence
from documents.models import Collection, Document
from inference import images

NAME_MAX = 255


def _clean_name(name: str) -> str:
    name = PurePath((name or "").replace("\\", "/")).name.strip()
    if not name:
        raise BadInput(_("A file needs a name."), param="name")
    return name[:NAME_MAX]


def _sha256(file: File) -> str:
    digest = hashlib.sha256()
    file.seek(0)
    for part in file.chunks():
        digest.update(part)
    file.seek(0)
    return digest.hexdigest()


def upload_document(
    user,
    file: File,
    *,
    name: str | None = None,
    conversation=None,
    collection: Collection | None = None,
) -> Document:
    """Keep `file` (an UploadedFile, or any django File) as `user`'s, in `conversation` (a chat.Conversation
    of theirs), in `collection`, or in neither yet (the composer, before the chat exists), and start
    reading it. Refusals: BadInput (400) for a type that cannot be read, FileLimit (413) for a plan limit,
    NotFound (404) for someone else's chat or collection."""
    name = _clean_name(name or file.name or "")
    picture = None
    if images.is_picture_name(name):
        if collection is not None:
            raise BadInput(
                _(
                    "“%(name)s” is a picture: pictures go with a message in a chat, not into a collection "
                    "(a collection's files are read for their text)."
                )
                % {"name": name},
                param="file",
            )
    elif kind_of(name) is None:
        pictures = _("Pictures (PNG, JPEG, WebP, GIF) can be sent with a message.")
        raise BadInput(f"{unsupported_sentence(name)} {pictures}", param="file")
    if conversation is not None and conversation.owner_id != user.pk:
        raise NotFound(_("There is no such chat."))
    if collection is not None and collection.owner_id != user.pk:
        raise NotFound(_("There is no such collection."))
    plan = billing.current_period(user).plan
    size = file.size or 0
    if images.is_picture_name(name):
        picture = _picture(plan, file, name, size)
    with transaction.atomic():
        # One upload at a time per person while counting, so two cannot both take the last room.
        User.objects.select_for_update().filter(pk=user.pk).first()
        billing.check_file_upload(
            plan,
            size_bytes=size,
            stored_bytes=selectors.stored_bytes(user),
            files_in_collection=collection.documents.count() if collection is not None else None,
        )
        document = Document(
            owner=user,
            conversation=conversation,
            collection=collection,
            name=name,
            content_type=picture.media_type if picture else (getattr(file, "content_type", "") or "")[:120],
            size_bytes=size,
            sha256=_sha256(file),
        )
        if picture is not None:
            # Nothing to read: it goes to the model as it is, with the next message sent (never one of
            # a chat's files before that: start_turn attaches it with its message).
            document.kind, document.state = Document.Kind.IMAGE, Document.State.READY
            document.width, document.height = picture.width, picture.height
            document.conversation = None
        document.file.save(name, file, save=False)
        try:
            document.save()
        except BaseException:
            document.file.storage.delete(document.file.name)  # no row, no file
            raise
        if picture is None:
            transaction.on_commit(lambda: runner.start_ingestion(document.pk))
    return document


def _picture(plan, file: File, name: str, size: int) -> images.Picture:
    """The picture an image upload holds: refused when the plan sends no images (403, naming the plan
    that does), when it is larger than an engine is sent (413), or when it is not a picture that reads
    (400)."""
    billing.check_images_allowed(plan)
    limit = settings.API_IMAGE_MAX_BYTES
    if size > limit:
        raise TooLarge(
            _(
                "“%(name)s” is %(size)s; a picture sent to the model may be up to %(limit)s. "
                "Scale it down (or crop it) and attach it again."
            )
            % {"name": name, "size": in_bytes(size), "limit": in_bytes(limit)},
            param="file",
        )
    file.seek(0)
    data = file.read()
    file.seek(0)
    picture = images.picture_of(data)
    if picture is None:
        raise BadInput(
            _("“%(name)s” could not be read as a PNG, JPEG, WebP or GIF picture.") % {"name": name}, param="file"
        )
    return picture


def cancel_ingestion(user, document_id: int) -> Document:
    """Stop reading a file: it is `cancelled` at once; the running job notices at its next step and
    removes the passages it saved. A file already read (or failed) cannot be cancelled (403)."""
    document = selectors.document_for(user, document_id)
    updated = Document.objects.filter(pk=document.pk, state__in=Document.IN_PROGRESS).update(
        state=Document.State.CANCELLED, failure=""
    )
    document.refresh_from_db()
    if not updated:
        raise NotAllowed(
            _("“%(name)s” is no longer being read (%(state)s).")
            % {"name": document.name, "state": document.get_state_display().lower()}
        )
    return document


def delete_document(user, document_id: int) -> Document:
    """Delete a file: its passages, its index entries and the stored file (documents.signals, as when its
    chat, its collection or its owner's account is deleted); a read in progress stops."""
    document = selectors.document_for(user, document_id)
    document.delete()  # passages cascade; a running read finds the row gone and stops
    return document


def rename_document(user, document_id: int, name: str) -> Document:
    document = selectors.document_for(user, document_id)
    document.name = _clean_name(name)
    document.save(update_fields=["name", "updated"])
    return document


def attach_to_conversation(user, document_ids: Iterable[int], conversation) -> list[Document]:
    """Put the person's pending uploads (made in the composer before the chat existed) in `conversation`.
    Refuses (404) the whole request if any id is not one of their files, or the chat is not theirs; a
    file already in another chat or in a collection is refused too (400)."""
    ids = sorted(set(document_ids))
    if conversation.owner_id != user.pk:
        raise NotFound(_("There is no such chat."))
    with transaction.atomic():
        documents = list(Document.objects.select_for_update().filter(owner=user, pk__in=ids))
        if len(documents) != len(ids):
            raise NotFound(_("There is no such file."), param="documents")
        taken = [d for d in documents if d.collection_id or (d.conversation_id not in (None, conversation.pk))]
        if taken:
            raise BadInput(
                _("“%(name)s” already belongs to another chat or a collection.") % {"name": taken[0].name},
                param="documents",
            )
        Document.objects.filter(pk__in=ids).update(conversation=conversation)
    for document in documents:
        document.conversation = conversation
    return documents


# --- collections -----------------------------------------------------------------------------------------


def _collection_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise BadInput(_("A collection needs a name."), param="name")
    if len(name) > 200:
        raise BadInput(_("A collection's name can be at most 200 characters."), param="name")
    return name


def create_collection(user, name: str) -> Collection:
    try:
        with transaction.atomic():
            return Collection.objects.create(owner=user, name=_collection_name(name))
    except IntegrityError:
        raise BadInput(
            _("You already have a collection called “%(name)s”.") % {"name": name.strip()}, param="name"
        ) from None


def rename_collection(user, collection_id: int, name: str) -> Collection:
    collection = selectors.collection_for(user, collection_id)
    collection.name = _collection_name(name)
    try:
        with transaction.atomic():
            collection.save(update_fields=["name"])
    except IntegrityError:
        raise BadInput(
            _("You already have a collection called “%(name)s”.") % {"name": collection.name}, param="name"
        ) from None
    return collection


def delete_collection(user, collection_id: int) -> Collection:
    """Delete a collection and every file in it (stored files and index entries too: documents.signals)."""
    collection = selectors.collection_for(user, collection_id)
    collection.delete()
    return collection


#: The most collections one chat may use.
MAX_COLLECTIONS_PER_CHAT = 20


def use_in_conversation(user, conversation, collection_ids: object) -> None:
    """The chat's answers read exactly these of the person's collections from now on. `collection_ids`
    comes from a client: a list of whole numbers (400 otherwise), each one of theirs (404 otherwise)."""
    ids = collection_ids
    if not isinstance(ids, list | tuple) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise BadInput("collection_ids must be a list of whole numbers.", param="collection_ids")
    if len(ids) > MAX_COLLECTIONS_PER_CHAT:
        raise BadInput(
            _("A chat can use at most %(limit)s collections.") % {"limit": MAX_COLLECTIONS_PER_CHAT},
            param="collection_ids",
        )
    if conversation.owner_id != user.pk:
        raise NotFound(_("There is no such chat."))
    found = list(Collection.objects.filter(owner=user, pk__in=set(ids)).values_list("pk", flat=True))
    if len(found) != len(set(ids)):
        raise NotFound(_("There is no such collection."), param="collection_ids")
    conversation.collections.set(found)
