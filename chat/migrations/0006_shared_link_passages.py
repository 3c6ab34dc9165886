from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0005_answer_sources"),
    ]

    operations = [
        migrations.AddField(
            model_name="sharedconversation",
            name="show_passages",
            field=models.BooleanField(
                default=False,
                help_text="Show, under each cited source, the passage of the owner's file that the answer quoted.",
            ),
        ),
    ]
