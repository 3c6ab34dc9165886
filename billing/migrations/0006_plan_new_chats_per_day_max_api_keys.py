import django.core.validators
from django.db import migrations, models

#: The seed plans' figures (billing/seed.py): new chats a day, active API keys at most. Other plans keep
#: the fields' defaults, 100 and 10.
SEEDED = {"free": (100, 2), "plus": (500, 10), "pro": (2000, 50)}


def set_seeded_plans(apps, schema_editor):
    Plan = apps.get_model("billing", "Plan")
    for slug, (new_chats, api_keys) in SEEDED.items():
        Plan.objects.filter(slug=slug).update(new_chats_per_day=new_chats, max_api_keys=api_keys)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0005_plan_answers_at_once"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="new_chats_per_day",
            field=models.PositiveIntegerField(
                default=100,
                help_text="Chats one person may start in any 24 hours (the page, the WebSocket and scripts "
                "together); one more is refused (429) until the oldest leaves the window. Chats already started "
                "are never limited. New shared links a day are capped at the same number.",
                validators=[django.core.validators.MinValueValidator(1)],
                verbose_name="new chats a day",
            ),
        ),
        migrations.AddField(
            model_name="plan",
            name="max_api_keys",
            field=models.PositiveSmallIntegerField(
                default=10,
                help_text="API keys one person may hold at once (revoked and expired ones do not count); one more "
                "is refused (403) until one is revoked. Twice this many may be made in any 24 hours.",
                validators=[django.core.validators.MinValueValidator(1)],
                verbose_name="active API keys at most",
            ),
        ),
        migrations.RunPython(set_seeded_plans, migrations.RunPython.noop),
    ]
