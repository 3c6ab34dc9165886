from django.apps import AppConfig


class DocumentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "documents"
    verbose_name = "Files and collections"

    def ready(self) -> None:
        # A deleted file's stored copy and index entries go with its row (documents.signals).
        from documents import signals  # noqa: F401
