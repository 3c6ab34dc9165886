from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate


class DocumentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "documents"
    verbose_name = "Files and collections"

    def ready(self) -> None:
        from documents.search.backends.sqlite import load_sqlite_vec, reinstall_triggers

        # The SQLite search index (and its triggers) needs sqlite-vec in every connection.
        connection_created.connect(load_sqlite_vec, dispatch_uid="documents.load_sqlite_vec")
        post_migrate.connect(reinstall_triggers, sender=self, dispatch_uid="documents.reinstall_triggers")
