from django.apps import AppConfig


class ReviewConfig(AppConfig):
    """Staff review of flags: the moderation queue and its decisions. No models of its own: the flags
    and warnings are moderation's; this app acts on them, on messages and on accounts."""

    name = "review"
    verbose_name = "Moderation review"
