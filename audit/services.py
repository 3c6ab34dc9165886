"""Writes the audit log. Every staff action goes through `record`; admin edits through `record_admin_edit`;
reading what users wrote through `record_reading` (a reason first) and exports through `record_export`.

The apps below the console write here (accounts, inference, chat, moderation, review); the console
shows the log (audit/admin.py is its page)."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db import models

from audit.changes import values_of
from audit.models import AuditEntry
from config.refusals import BadInput

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
        details=(
            {"change": entry.get_change_message(), "values": values_of(entry.change_message)}
            if entry.action_flag == CHANGE
            else {}
        ),
        target_type=f"{content_type.app_label}.{content_type.model}" if content_type else "",
        target_id=entry.object_id or "",
        target_repr=entry.object_repr,
    )


def record_deletions(actor, objects: list[models.Model]) -> None:
    """Several objects deleted at once by the admin's "Delete selected" action (Django writes their log
    entries in one bulk insert, which sends no signal)."""
    for obj in objects:
        record(actor, "admin.delete", obj)


class ReasonRequired(BadInput):
    code = "reason_required"


#: Longest reason kept for a reading or an export (the console's reason boxes say the same).
REASON_MAX = 500


def _reason(reason: object, doing: str) -> str:
    reason = str(reason or "").strip()
    if not reason:
        raise ReasonRequired(f"Give a reason: {doing} is recorded in the audit log with it.")
    if len(reason) > REASON_MAX:
        raise BadInput(f"Keep the reason under {REASON_MAX} characters.")
    return reason


def record_reading(
    actor, conversation: models.Model, reason: object, details: dict[str, Any] | None = None
) -> AuditEntry:
    """The rule for reading what users wrote in the console, wherever it is shown (a conversation's page,
    the conversation up to a rated answer): only with a reason, recorded before anything is shown as
    `conversation.view` on the conversation read (`details` say from where). A blank reason is refused."""
    reason = _reason(reason, "reading a user's conversation")
    return record(actor, "conversation.view", conversation, reason, details=details)


def record_export(
    actor,
    action: str,
    rows: int,
    reason: object,
    details: dict[str, Any] | None = None,
    *,
    target_type: str = "",
    require_reason: bool = True,
) -> AuditEntry:
    """An export of what users wrote (`action`, e.g. `feedback.export`): how many rows and why, recorded
    before the first row leaves. Staff must give a reason; a command run on the server (`actor` None,
    `require_reason` False) may leave it blank."""
    reason = _reason(reason, "exporting users' conversations") if require_reason else str(reason or "").strip()
    return record(
        actor,
        action,
        None,
        reason,
        details={**(details or {}), "rows": rows},
        target_type=target_type,
        target_repr=f"{rows} row{'s' if rows != 1 else ''}",
    )
