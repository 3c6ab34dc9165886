"""Whether an account may use the product, and if not, the sentence that says why.

The one place that decides it. The middleware (pages, the chat's JSON endpoints and SSE), the
WebSocket consumer, the chat services and the API's key check all ask `account_refusal`, so a
suspended user reads the same sentence, with the reason staff gave, wherever they are.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from accounts.models import User
from accounts.selectors import has_totp
from config.refusals import NotAllowed


class AccountSuspended(NotAllowed):
    """403 `account_suspended`: staff suspended the account (accounts.services.suspend_user)."""

    code = "account_suspended"


class TwoFactorRequired(NotAllowed):
    """403 `two_factor_required`: a staff account that has not enrolled TOTP yet (MFA_REQUIRED_FOR_STAFF)."""

    code = "two_factor_required"


class AccountClosed(NotAllowed):
    """403 `account_closed`: the account was deactivated (its API keys may still be presented)."""

    code = "account_closed"


def suspension_sentence(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        return "Your account has been suspended by our staff. No reason was recorded."
    if reason[-1] not in ".!?":
        reason += "."
    return f"Your account has been suspended by our staff. Reason: {reason}"


def account_refusal(user: User) -> NotAllowed | None:
    """None if `user` may use the product; otherwise the refusal (403) to answer every request with."""
    if user.is_suspended:
        return AccountSuspended(suspension_sentence(user.suspended_reason))
    if not user.is_active:
        return AccountClosed("This account has been closed.")
    return None


def check_account(user: User) -> None:
    """Raise the account's refusal, if it has one."""
    refusal = account_refusal(user)
    if refusal is not None:
        raise refusal


def two_factor_refusal(user: User) -> TwoFactorRequired | None:
    """None unless `user` is staff who must enrol two-factor first (outside the enrolment pages)."""
    if settings.MFA_REQUIRED_FOR_STAFF and user.is_authenticated and user.is_staff and not has_totp(user):
        return TwoFactorRequired("Staff accounts must set up two-factor authentication first: open "
                                 f"{reverse('mfa_activate_totp')} in the browser.")
    return None
