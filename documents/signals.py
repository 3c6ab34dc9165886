"""The documents app's receivers, connected when Django starts (documents.apps).

- A file's stored copy goes with its row, however the row goes: deleted by its owner, with its chat,
  with its collection, or with its owner's account (data deletion must not leave a person's file in
  the object store). After the commit: a rolled-back deletion keeps the file. (Its passages and their
  index entries need nothing here: the chunk rows cascade, and the index lives on them or follows
  them by trigger, documents.search.)
- The SQLite search index needs sqlite-vec in every new connection, and its triggers back after a
  migration that rebuilt the table (documents.search.backends.sqlite).
"""

from __future__ import annotations

from django.db import transaction
from django.db.backends.signals import connection_created
from django.db.models.signals import post_delete, post_migrate
from django.dispatch import receiver

from documents.models import Document
from documents.search.backends.sqlite import load_sqlite_vec, reinstall_triggers

connection_created.connect(load_sqlite_vec, dispatch_uid="documents.load_sqlite_vec")


@receiver(post_migrate, dispatch_uid="documents.reinstall_triggers")
def _after_migrate(sender, **kwargs) -> None:
    if sender.name == "documents":
        reinstall_triggers(sender, **kwargs)


@receiver(post_delete, sender=Document, dispatch_uid="documents.remove_stored_file")
def remove_stored_file(sender, instance: Document, **kwargs) -> None:
    stored, storage = instance.file.name, instance.file.storage
    if stored:
        transaction.on_commit(lambda: storage.delete(stored))
