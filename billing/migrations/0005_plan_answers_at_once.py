import django.core.validators
from django.db import migrations, models

#: The seed plans' figures (billing/seed.py); other plans keep the field's default, 4.
SEEDED = {"free": 2, "plus": 4, "pro": 8}


def set_seeded_plans(apps, schema_editor):
    Plan = apps.get_model("billing", "Plan")
    for slug, at_once in SEEDED.items():
        Plan.objects.filter(slug=slug).update(answers_at_once=at_once)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0004_plan_fallback_model"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="answers_at_once",
            field=models.PositiveSmallIntegerField(
                default=4,
                help_text="Answers one person may have being written at once, web and API together; one more is "
                "refused (429, try again in a few seconds) until one ends.",
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
        migrations.RunPython(set_seeded_plans, migrations.RunPython.noop),
    ]
