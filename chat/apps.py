from django.apps import AppConfig


class ChatConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "chat"

    def ready(self) -> None:
        # The suspension's receiver (accounts.signals.account_suspended), and sign-out's and password
        # changes' (chat.session_end).
        from chat import session_end, suspension  # noqa: F401
