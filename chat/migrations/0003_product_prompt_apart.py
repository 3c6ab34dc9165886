"""The product's prompt is no longer copied into each conversation: assembly pins it first itself.

Conversations made before kept a copy of CHAT_DEFAULT_SYSTEM_PROMPT as their own system prompt; with
it now added by assembly, that copy would be sent twice. Clear the copies (those equal to the prompt
configured now); a prompt a conversation was given on purpose stays as it is.
"""

from django.conf import settings
from django.db import migrations


def clear_copies(apps, schema_editor):
    Conversation = apps.get_model("chat", "Conversation")
    if settings.CHAT_DEFAULT_SYSTEM_PROMPT:
        Conversation.objects.filter(system_prompt=settings.CHAT_DEFAULT_SYSTEM_PROMPT).update(system_prompt="")


def restore_copies(apps, schema_editor):
    Conversation = apps.get_model("chat", "Conversation")
    Conversation.objects.filter(system_prompt="").update(system_prompt=settings.CHAT_DEFAULT_SYSTEM_PROMPT)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0002_shared_conversation"),
    ]

    operations = [
        migrations.RunPython(clear_copies, restore_copies),
    ]
