"""Admin edits into the audit log, and the moderator group kept in step with the installed models."""

from __future__ import annotations

from django.apps import apps as global_apps
from django.contrib.admin.models import LogEntry
from django.db.models.signals import post_migrate, post_save
from django.dispatch import receiver

from console import roles, services


@receiver(post_save, sender=LogEntry, dispatch_uid="console-audit-admin-edits")
def audit_admin_edit(sender, instance: LogEntry, created: bool, **kwargs) -> None:
    if created:
        services.record_admin_edit(instance)


@receiver(post_migrate, dispatch_uid="console-moderator-group")
def keep_moderator_group(sender, **kwargs) -> None:
    # Once per migrate: the console comes after the other apps, so their permissions exist by now.
    if getattr(sender, "label", None) != "console":
        return
    apps = kwargs.get("apps") or global_apps
    try:
        apps.get_model("auth", "Permission")
    except LookupError:  # a partial migration that has not reached auth yet
        return
    roles.sync_moderator_group(apps)
