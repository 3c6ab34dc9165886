"""The audit log's model now belongs to the `audit` app (audit.0001), which keeps this app's table:
only Django's record of the model leaves here; the table and its rows stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_moderator_group"),
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditEntry")],
            database_operations=[],
        ),
    ]
