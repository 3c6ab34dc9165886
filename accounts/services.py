"""Writes to accounts: suspension and reinstatement. Views, admin actions and tasks call these.

When staff do it (`actor` given), the audit log records who, when and why.
"""

from django.utils import timezone

from accounts.models import User
from console import services as audit


def suspend_user(user: User, reason: str, *, actor: User | None = None) -> User:
    """Stop a user from signing in; any open session ends on its next request."""
    reason = reason.strip()
    if not reason:
        raise ValueError("Give a reason: the user is shown it when they try to sign in.")
    user.is_suspended = True
    user.suspended_reason = reason[:500]
    user.suspended_at = timezone.now()
    user.save(update_fields=["is_suspended", "suspended_reason", "suspended_at"])
    if actor is not None:
        audit.record(actor, "user.suspend", user, reason)
    return user


def reinstate_user(user: User, *, actor: User | None = None, reason: str = "") -> User:
    user.is_suspended = False
    user.suspended_reason = ""
    user.suspended_at = None
    user.save(update_fields=["is_suspended", "suspended_reason", "suspended_at"])
    if actor is not None:
        audit.record(actor, "user.reinstate", user, reason)
    return user
