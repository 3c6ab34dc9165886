from django.apps import AppConfig


class ChatConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "chat"

    def ready(self) -> None:
        # The suspension's receiver (accounts.signals.account_suspended), sign-out's and password
        # changes' (chat.session_end), and what clears the response cache (chat.cache_signals).
        from chat import cache_signals, session_end, suspension  # noqa: F401
