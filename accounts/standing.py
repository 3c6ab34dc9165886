"""Whether an account may use the product, and if not, the sentence that says why.

The one place that decides it. The middleware (pages, the chat's JSON endpoints and SSE), the
WebSocket consumer, the chat services and the API's key check all ask `account_refusal`, so a
suspended user reads the same sentence, with the reason staff gave, wherever they are.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.translation import gettext as _

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


def _when(moment: datetime) -> str:
    return date_format(moment.astimezone(UTC), "j F Y, H:i") + " UTC"


def suspension_sentence(reason: str, *, until: datetime | None = None, banned: bool = False) -> str:
    """What a suspended (or banned) user reads, word for word, wherever they are refused."""
    reason = reason.strip()
    if reason and reason[-1] not in ".!?":
        reason += "."
    if banned:
        lead = _("Your account has been banned by our staff.")
    elif until is not None:
        lead = _("Your account has been suspended by our staff until %(until)s.") % {"until": _when(until)}
    else:
        lead = _("Your account has been suspended by our staff.")
    # The reason is staff's own words, shown as they wrote them.
    then = _("Reason: %(reason)s") % {"reason": reason} if reason else _("No reason was recorded.")
    return f"{lead} {then}"


def account_refusal(user: User) -> NotAllowed | None:
    """None if `user` may use the product; otherwise the refusal (403) to answer every request with.

    A suspension for a period holds until `accounts.services.end_expired_suspensions` lifts it (within
    a minute of its end): deciding here from the clock would let the user in without ending their old
    sessions, which reinstatement does."""
    if user.is_suspended:
        sentence = suspension_sentence(
            user.suspended_reason, until=user.suspended_until, banned=user.banned_at is not None
        )
        return AccountSuspended(sentence)
    if not user.is_active:
        return AccountClosed(_("This account has been closed."))
    return None


def check_account(user: User) -> None:
    """Raise the account's refusal, if it has one."""
    refusal = account_refusal(user)
    if refusal is not None:
        raise refusal


def two_factor_refusal(user: User) -> TwoFactorRequired | None:
    """None unless `user` is staff who must enrol two-factor first (outside the enrolment pages)."""
    if settings.MFA_REQUIRED_FOR_STAFF and user.is_authenticated and user.is_staff and not has_totp(user):
        return TwoFactorRequired(
            _("Staff accounts must set up two-factor authentication first: open %(page)s in the browser.")
            % {"page": reverse("mfa_activate_totp")}
        )
    return None
