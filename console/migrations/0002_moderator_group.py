"""The `moderator` group and its permissions (console/roles.py says which)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

from console.roles import sync_moderator_group


def create_moderator_group(apps, schema_editor):
    # Permissions are normally created after the last migration; the group needs them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    sync_moderator_group(apps)


def remove_moderator_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="moderator").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0001_initial"),
        ("accounts", "0004_suspend_permission"),
        ("chat", "0004_answer_feedback"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_moderator_group, remove_moderator_group)]
