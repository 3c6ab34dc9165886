"""The audit log moves here from the console app, rows and all: the table keeps its name
(`console_auditentry`), so this changes Django's idea of which app owns it and nothing in the
database but the content type, renamed in place so that the permissions on it (a moderator's
`view_auditentry`) and anything else pointing at it stay attached."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def move_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.using(schema_editor.connection.alias).filter(app_label="console", model="auditentry").update(
        app_label="audit"
    )


def move_content_type_back(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.using(schema_editor.connection.alias).filter(app_label="audit", model="auditentry").update(
        app_label="console"
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        # The table is made by console.0001; console.0002 made the content type and its permissions.
        ("console", "0002_moderator_group"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEntry",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "created",
                            models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False),
                        ),
                        ("actor_email", models.EmailField(blank=True, max_length=254)),
                        (
                            "action",
                            models.CharField(
                                db_index=True,
                                help_text='What was done, e.g. "user.suspend", "conversation.view", "admin.change".',
                                max_length=64,
                            ),
                        ),
                        (
                            "target_type",
                            models.CharField(
                                blank=True, help_text="app_label.model of what it was done to.", max_length=100
                            ),
                        ),
                        ("target_id", models.CharField(blank=True, max_length=64)),
                        ("target_repr", models.CharField(blank=True, max_length=200)),
                        ("reason", models.TextField(blank=True)),
                        ("details", models.JSONField(blank=True, default=dict)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "audit entry",
                        "verbose_name_plural": "audit log",
                        "ordering": ("-created", "-pk"),
                        "db_table": "console_auditentry",
                        "indexes": [models.Index(fields=["target_type", "target_id"], name="audit_target")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, move_content_type_back),
    ]
