"""The categories a new installation starts with: modest, and meant to be edited by staff."""

from django.db import migrations

DEFAULTS = [
    {
        "name": "Spam",
        "description": "Bulk advertising and get-rich-quick offers.",
        "words": "buy followers\nbuy cheap followers\nguaranteed casino bonus\nclick here to claim your prize\n"
        "work from home and earn",
        "patterns": r"earn \$?\d[\d,]* (?:a|per) (?:day|hour) from home",
        "action": "block",
        "applies_to": "both",
    },
    {
        "name": "Credential phishing",
        "description": "Asking people for their passwords, one-time codes or card numbers.",
        "words": "verify your account by entering your password\nconfirm your card number and cvv",
        "patterns": r"(?:send|give|tell) me (?:your|their) (?:password|passcode|pin|one-time code|2fa code|otp)",
        "action": "block",
        "applies_to": "both",
    },
    {
        "name": "Self-harm",
        "description": "Someone who may be at risk. Let through (a refusal helps nobody in distress) and flagged, "
        "so staff can look.",
        "words": "how to kill myself\nways to kill myself\nI want to end my life",
        "patterns": "",
        "action": "flag",
        "applies_to": "both",
    },
]


def add_defaults(apps, schema_editor):
    Category = apps.get_model("moderation", "Category")
    for fields in DEFAULTS:
        Category.objects.get_or_create(name=fields["name"], defaults=fields)


def remove_defaults(apps, schema_editor):
    apps.get_model("moderation", "Category").objects.filter(name__in=[d["name"] for d in DEFAULTS]).delete()


class Migration(migrations.Migration):
    dependencies = [("moderation", "0001_initial")]

    operations = [migrations.RunPython(add_defaults, remove_defaults)]
