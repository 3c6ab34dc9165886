from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0004_answer_feedback"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="sources",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
