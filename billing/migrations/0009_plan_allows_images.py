from django.db import migrations, models

#: The seed plans that allow images (billing/seed.py): Plus and Pro. Free and other plans keep the default, no.
SEEDED = ("plus", "pro")


def set_seeded_plans(apps, schema_editor):
    apps.get_model("billing", "Plan").objects.filter(slug__in=SEEDED).update(allows_images=True)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0008_plan_file_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="allows_images",
            field=models.BooleanField(
                default=False,
                help_text="Images may be sent to vision models (image_url parts). Images are not screened by the text moderation backends, and each costs up to 16,386 prompt tokens.",
            ),
        ),
        migrations.RunPython(set_seeded_plans, migrations.RunPython.noop),
    ]
