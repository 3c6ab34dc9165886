"""The audit log moved from the console app to the `audit` app (migrations audit.0001 and
console.0003): rows written before the move are read after it, and the moderators' permission to read
the log moves with its content type."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from audit.models import AuditEntry
from console.roles import MODERATOR_GROUP

BEFORE_THE_MOVE = [("console", "0002_moderator_group"), ("audit", None)]


def migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    ContentType.objects.clear_cache()
    return executor


@pytest.mark.django_db(transaction=True)
def test_audit_entries_written_before_the_move_are_kept_with_the_moderators_permission():
    executor = migrate(BEFORE_THE_MOVE)
    old = executor.loader.project_state([("console", "0002_moderator_group")]).apps
    entry = old.get_model("console", "AuditEntry").objects.create(
        actor_email="root@example.com", action="user.suspend", target_repr="ada@example.com", reason="spam"
    )
    old_type = ContentType.objects.get(app_label="console", model="auditentry")
    assert (
        Group.objects.get(name=MODERATOR_GROUP)
        .permissions.filter(content_type=old_type, codename="view_auditentry")
        .exists()
    )

    migrate(executor.loader.graph.leaf_nodes())

    kept = AuditEntry.objects.get(pk=entry.pk)
    assert (kept.actor_email, kept.action, kept.target_repr, kept.reason) == (
        "root@example.com",
        "user.suspend",
        "ada@example.com",
        "spam",
    )
    assert not ContentType.objects.filter(app_label="console", model="auditentry").exists()
    moved = ContentType.objects.get_for_model(AuditEntry)
    assert moved.pk == old_type.pk  # renamed in place: what pointed at it still does
    view_log = Permission.objects.get(content_type=moved, codename="view_auditentry")
    assert Group.objects.get(name=MODERATOR_GROUP).permissions.filter(pk=view_log.pk).exists()
