"""The audit log: who did what, to what, when and why. Append-only.

The table keeps the name it had when the log lived in the console app (`console_auditentry`): the
model moved to this app, its rows did not (migration audit.0001)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AppendOnlyError(Exception):
    """An audit entry is never changed or deleted once written."""


class AuditQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("Audit entries cannot be changed.")

    def delete(self):
        raise AppendOnlyError("Audit entries cannot be deleted.")


class AuditEntry(models.Model):
    created = models.DateTimeField(default=timezone.now, db_index=True, editable=False)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept as written: the entry still says who it was after their account is deleted.
    actor_email = models.EmailField(blank=True)
    action = models.CharField(
        max_length=64,
        db_index=True,
        help_text='What was done, e.g. "user.suspend", "conversation.view", "admin.change".',
    )
    target_type = models.CharField(max_length=100, blank=True, help_text="app_label.model of what it was done to.")
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ("-created", "-pk")
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        db_table = "console_auditentry"
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target")]

    def __str__(self) -> str:
        return f"{self.actor_email or 'system'} {self.action} {self.target_repr}".strip()

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError("Audit entries cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("Audit entries cannot be deleted.")
