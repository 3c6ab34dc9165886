"""A file's stored copy and its search index entries go with its row, however the row goes: deleted by
its owner, with its chat, with its collection, or with its owner's account (data deletion must not leave
a person's file in the object store). After the commit: a rolled-back deletion keeps the file."""

from __future__ import annotations

from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from documents import search
from documents.models import Document


@receiver(post_delete, sender=Document, dispatch_uid="documents.remove_stored_file")
def remove_stored_file(sender, instance: Document, **kwargs) -> None:
    search.remove_document(instance.pk)
    stored, storage = instance.file.name, instance.file.storage
    if stored:
        transaction.on_commit(lambda: storage.delete(stored))
