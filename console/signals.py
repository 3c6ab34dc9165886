"""The moderator group kept in step with the installed models."""

from __future__ import annotations

from django.apps import apps as global_apps
from django.db.models.signals import post_migrate
from django.dispatch import receiver

from console import roles


def _last_app_with_models() -> str:
    # Django sends post_migrate only to apps that have models, in INSTALLED_APPS order, each after its
    # own permissions are made; the console has none, so the group waits for the last app that does.
    return [config.label for config in global_apps.get_app_configs() if config.models_module is not None][-1]


@receiver(post_migrate, dispatch_uid="console-moderator-group")
def keep_moderator_group(sender, **kwargs) -> None:
    # Once per migrate, when every app's permissions exist.
    if getattr(sender, "label", None) != _last_app_with_models():
        return
    apps = kwargs.get("apps") or global_apps
    try:
        apps.get_model("auth", "Permission")
    except LookupError:  # a partial migration that has not reached auth yet
        return
    roles.sync_moderator_group(apps)
