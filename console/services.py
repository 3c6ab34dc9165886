"""Writes the audit log. Every staff action goes through `record`; admin edits through `record_admin_edit`."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db import models

from console.models import AuditEntry

ADMIN_ACTIONS = {ADDITION: "admin.add", CHANGE: "admin.change", DELETION: "admin.delete"}


def record(
    actor,
    action: str,
    target: models.Model | None = None,
    reason: str = "",
    details: dict[str, Any] | None = None,
    *,
    target_type: str = "",
    target_id: str = "",
    target_repr: str | None = None,
) -> AuditEntry:
    """Append one entry: `actor` (a user, or None for the system) did `action` to `target`, because `reason`."""
    actor = actor if getattr(actor, "is_authenticated", False) else None
    if target is not None:
        target_type = target._meta.label_lower
        target_id = str(target.pk)
        if target_repr is None:
            target_repr = str(target)
    return AuditEntry.objects.create(
        actor=actor,
        actor_email=getattr(actor, "email", "") or "",
        action=action,
        target_type=target_type,
        target_id=str(target_id or ""),
        target_repr=(target_repr or "")[:200],
        reason=reason.strip(),
        details=details or {},
    )


def record_admin_edit(entry: LogEntry) -> AuditEntry:
    """An add, change or deletion made through the admin's forms (Django wrote `entry` for it)."""
    content_type = entry.content_type
    return record(
        entry.user,
        ADMIN_ACTIONS.get(entry.action_flag, "admin.other"),
        details={"change": entry.get_change_message()} if entry.action_flag == CHANGE else {},
        target_type=f"{content_type.app_label}.{content_type.model}" if content_type else "",
        target_id=entry.object_id or "",
        target_repr=entry.object_repr,
    )


def record_deletions(actor, objects: list[models.Model]) -> None:
    """Several objects deleted at once by the admin's "Delete selected" action (Django writes their log
    entries in one bulk insert, which sends no signal)."""
    for obj in objects:
        record(actor, "admin.delete", obj)
