"""Reads for moderation that users see (selectors only read)."""

from __future__ import annotations

from accounts.models import User
from moderation.models import AccountWarning


def unseen_warnings(user: User) -> list[AccountWarning]:
    """The warnings staff gave `user` that they have not dismissed yet, oldest first."""
    return list(AccountWarning.objects.filter(user=user, seen_at__isnull=True).order_by("created", "pk"))
