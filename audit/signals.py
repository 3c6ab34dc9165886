"""Admin edits into the audit log: Django writes a LogEntry for each add, change or deletion made
through the admin's forms, and each one becomes an audit entry."""

from __future__ import annotations

from django.contrib.admin.models import LogEntry
from django.db.models.signals import post_save
from django.dispatch import receiver

from audit import services


@receiver(post_save, sender=LogEntry, dispatch_uid="audit-admin-edits")
def audit_admin_edit(sender, instance: LogEntry, created: bool, **kwargs) -> None:
    if created:
        services.record_admin_edit(instance)
