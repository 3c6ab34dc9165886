"""Whether an account may use the product, and if not, the sentence that says why.

The one place that decides it. The middleware (pages, the chat's JSON endpoints and SSE), the
WebSocket consumer, the chat services and the API's key check all ask `account_refusal`, so a
suspended user reads the same sentence, with the reason staff gave, wherever they are.
"""

from __future__ import annotations

from accounts.models import User
from config.refusals import NotAllowed


class AccountSuspended(NotAllowed):
    """403 `account_suspended`: staff suspended the account (accounts.services.suspend_user)."""

    code = "account_suspended"


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
