"""Staff roles. Superusers can do everything; the `moderator` group is defined here, in one place.

Moderators work the moderation queue (every permission of the `moderation` app, whatever models it
has), read users, API keys, conversations (with a recorded reason), answer feedback and the audit log,
suspend and reinstate users, and take shared links down. They cannot change plans, billing or
inference nodes, nor edit users.
"""

from __future__ import annotations

MODERATOR_GROUP = "moderator"

# (app_label, codename) pairs granted to moderators.
MODERATOR_PERMISSIONS = (
    ("accounts", "view_user"),
    ("accounts", "suspend_user"),
    ("accounts", "view_apikey"),
    ("chat", "view_conversation"),
    ("chat", "view_sharedconversation"),
    ("chat", "change_sharedconversation"),
    ("chat", "view_answerfeedback"),
    ("audit", "view_auditentry"),
)
# Every permission of these apps (their models may be added later: post_migrate keeps the group in step).
MODERATOR_APPS = ("moderation",)


def sync_moderator_group(apps) -> None:
    """Create the group if missing and give it exactly the permissions above that exist."""
    from django.db.models import Q

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=MODERATOR_GROUP)
    wanted = Q(content_type__app_label__in=MODERATOR_APPS)
    for app_label, codename in MODERATOR_PERMISSIONS:
        wanted |= Q(content_type__app_label=app_label, codename=codename)
    group.permissions.set(Permission.objects.filter(wanted))
