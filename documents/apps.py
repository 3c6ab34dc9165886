from django.apps import AppConfig


class DocumentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "documents"
    verbose_name = "Files and collections"

    def ready(self) -> None:
        # The receivers: stored files and index entries go with their rows; sqlite-vec in every SQLite
        # connection (documents.signals).
        from documents import signals  # noqa: F401
