from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0003_plan_changes_at_period_end"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="fallback_model",
            field=models.CharField(
                blank=True,
                help_text="A model id that answers this plan's free-tier requests when the model asked for is busy "
                "and this one is not (instead of a 503). Empty: no fallback.",
                max_length=100,
            ),
        ),
    ]
