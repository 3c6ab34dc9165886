from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_delete, post_migrate


class DocumentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "documents"
    verbose_name = "Files and collections"

    def ready(self) -> None:
        from documents.search.backends.sqlite import load_sqlite_vec, reinstall_triggers

        # The SQLite search index (and its triggers) needs sqlite-vec in every connection.
        connection_created.connect(load_sqlite_vec, dispatch_uid="documents.load_sqlite_vec")
        post_migrate.connect(reinstall_triggers, sender=self, dispatch_uid="documents.reinstall_triggers")
        # However a document goes (deleted by its owner, with its chat or collection, with the account),
        # its stored file goes too.
        from documents.services import remove_stored_file

        post_delete.connect(remove_stored_file, sender="documents.Document", dispatch_uid="documents.stored_file")
