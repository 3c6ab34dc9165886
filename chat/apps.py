from django.apps import AppConfig


class ChatConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "chat"

    def ready(self) -> None:
        # The suspension's receiver (accounts.signals.account_suspended).
        from chat import suspension  # noqa: F401
