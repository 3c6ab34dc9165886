from django.apps import AppConfig


class BillingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "billing"

    def ready(self) -> None:
        from billing import cache, checks  # noqa: F401  (the signals that drop cached periods; deploy checks)
