"""Writes to accounts: suspension and reinstatement. Views, admin actions and tasks call these."""

from django.utils import timezone

from accounts.models import User


def suspend_user(user: User, reason: str) -> User:
    """Stop a user from signing in; any open session ends on its next request."""
    reason = reason.strip()
    if not reason:
        raise ValueError("Give a reason: the user is shown it when they try to sign in.")
    user.is_suspended = True
    user.suspended_reason = reason[:500]
    user.suspended_at = timezone.now()
    user.save(update_fields=["is_suspended", "suspended_reason", "suspended_at"])
    return user


def reinstate_user(user: User) -> User:
    user.is_suspended = False
    user.suspended_reason = ""
    user.suspended_at = None
    user.save(update_fields=["is_suspended", "suspended_reason", "suspended_at"])
    return user
