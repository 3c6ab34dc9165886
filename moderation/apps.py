from django.apps import AppConfig


class ModerationConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "moderation"
    verbose_name = "Moderation"

    def ready(self) -> None:
        from django.db import transaction
        from django.db.models.signals import post_delete, post_save

        from moderation.backends.rules import bump_version
        from moderation.models import Category

        def changed(**kwargs) -> None:
            transaction.on_commit(bump_version)  # never before other processes can read the change

        post_save.connect(changed, sender=Category, dispatch_uid="moderation-rules-saved", weak=False)
        post_delete.connect(changed, sender=Category, dispatch_uid="moderation-rules-deleted", weak=False)
