"""Collections (knowledge bases): a person's files kept together and read by any of their chats that
uses the collection. Services write; `collections_of` reads."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Count, Q

from accounts.models import User
from config.refusals import BadInput, NotFound
from documents.models import Collection

MAX_NAME = 200


def _clean_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise BadInput("Give the collection a name.", param="name")
    name = " ".join(name.split())
    if len(name) > MAX_NAME:
        raise BadInput(f"A collection's name can be at most {MAX_NAME} characters.", param="name")
    return name


def get_collection(user: User, collection_id: int) -> Collection:
    try:
        return Collection.objects.get(pk=collection_id, owner=user)
    except Collection.DoesNotExist as exc:
        raise NotFound("That collection does not exist (it may have been deleted).") from exc


def collections_of(user: User) -> list[Collection]:
    """The person's collections, each with `files` (how many) and `ready_files`."""
    return list(
        Collection.objects.filter(owner=user).annotate(
            files=Count("documents"), ready_files=Count("documents", filter=Q(documents__state="ready"))
        )
    )


def create_collection(user: User, name: object) -> Collection:
    name = _clean_name(name)
    try:
        with transaction.atomic():
            return Collection.objects.create(owner=user, name=name)
    except IntegrityError as exc:
        raise BadInput(f"You already have a collection called “{name}”.", param="name") from exc


def rename_collection(user: User, collection_id: int, name: object) -> Collection:
    collection = get_collection(user, collection_id)
    collection.name = _clean_name(name)
    try:
        with transaction.atomic():
            collection.save(update_fields=["name"])
    except IntegrityError as exc:
        raise BadInput(f"You already have a collection called “{collection.name}”.", param="name") from exc
    return collection


def delete_collection(user: User, collection_id: int) -> Collection:
    """The collection and its files (their stored copies and passages too: documents.signals)."""
    collection = get_collection(user, collection_id)
    collection.delete()
    return collection


#: The most collections one chat may use.
MAX_PER_CONVERSATION = 20


def owned_collection_ids(user: User, ids: object) -> list[int]:
    """`ids` from a client, checked: a list of the person's collections' ids (400 for anything else,
    404 for one that is not theirs)."""
    if not isinstance(ids, list | tuple) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise BadInput("collection_ids must be a list of whole numbers.", param="collection_ids")
    if len(ids) > MAX_PER_CONVERSATION:
        raise BadInput(f"A chat can use at most {MAX_PER_CONVERSATION} collections.", param="collection_ids")
    wanted = set(ids)
    found = set(Collection.objects.filter(owner=user, pk__in=wanted).values_list("pk", flat=True))
    if wanted - found:
        raise NotFound("One of those collections does not exist (it may have been deleted).")
    return sorted(found)


def use_in_conversation(user: User, conversation, collection_ids: object) -> None:
    """The conversation's answers read exactly these of the person's collections from now on."""
    ids = owned_collection_ids(user, collection_ids)
    conversation.collections.set(ids)
