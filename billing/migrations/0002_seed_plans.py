from django.db import migrations

from billing.seed import seed_plans


def forwards(apps, schema_editor):
    seed_plans(apps.get_model("billing", "Plan"))


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
