"""Writes to accounts: suspension, reinstatement and deleting one's account. Views, admin actions and
tasks call these.

When staff do it (`actor` given), the audit log records who, when and why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from billing.services.quota import anonymise_usage
from billing.services.subscriptions import cancel_now
from config.refusals import NotAllowed
from console import services as audit

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class DeletedAccount:
    """What deleting an account did, without anything that names the person."""

    anonymous_id: str
    usage_rows: int
    subscriptions_canceled: int


def delete_account(user: User, *, password: str) -> DeletedAccount:
    """Delete the user's account for good, once they have confirmed it with their password.

    A live subscription is cancelled first, at once and at its provider (a provider that does not
    answer raises Busy and nothing is deleted). Then, in one transaction, the usage ledger is kept
    for accounting but detached from the person (billing.services.quota.anonymise_usage), and the
    user is deleted, which takes their conversations (with messages and shared links), API keys,
    email addresses, two-factor devices and billing rows with it.
    """
    if not user.has_usable_password():
        raise NotAllowed("Your account has no password yet. Set one under Account → Password, then confirm "
                         "the deletion with it.")
    if not user.check_password(password):
        raise NotAllowed("That password is not right. Your account was not deleted.")
    canceled = cancel_now(user)
    with transaction.atomic():
        anonymous_id, rows = anonymise_usage(user)
        user_id = user.pk
        user.delete()
    # The audit trail: no email or name, only what accounting can match against the ledger.
    logger.info("account %s deleted by its owner: %s usage rows kept as %s, %s subscriptions cancelled",
                user_id, rows, anonymous_id, len(canceled))
    return DeletedAccount(anonymous_id=anonymous_id, usage_rows=rows, subscriptions_canceled=len(canceled))
