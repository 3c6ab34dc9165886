from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0005_answer_sources"),
        ("documents", "0003_pages_read"),
    ]

    operations = [
        migrations.AddField(
            model_name="collection",
            name="conversations",
            field=models.ManyToManyField(blank=True, related_name="collections", to="chat.conversation"),
        ),
    ]
