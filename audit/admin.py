"""The audit log in the console: read-only for everybody, superusers included."""

from django.contrib import admin

from audit.changes import summary
from audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ("created", "actor_email", "action", "target_type", "target_repr", "what_changed", "reason")
    list_filter = ("action", "target_type", ("created", admin.DateFieldListFilter))
    search_fields = ("actor_email", "target_repr", "=target_id", "reason")
    search_help_text = "Search by staff email, target, target id or reason."
    date_hierarchy = "created"
    fields = (
        "created",
        "actor",
        "actor_email",
        "action",
        "target_type",
        "target_id",
        "target_repr",
        "reason",
        "details",
    )
    readonly_fields = fields
    actions = None

    @admin.display(description="what changed")
    def what_changed(self, entry: AuditEntry) -> str:
        values = (entry.details or {}).get("values")
        return summary(values) if values else ""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
