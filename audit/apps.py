from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit log: who did what, to what, when and why. The apps write it; the console shows it."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "audit"
    verbose_name = "Audit"

    def ready(self) -> None:
        from audit import signals  # noqa: F401  (admin edits into the audit log)
