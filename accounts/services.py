"""Writes to accounts: suspension, reinstatement and deleting one's account. Views, admin actions and
tasks call these.

The audit log records who (staff, or the system), when and why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from accounts.signals import account_suspended
from billing.services.quota import anonymise_usage
from billing.services.subscriptions import cancel_now
from config.refusals import NotAllowed
from console import services as audit

logger = logging.getLogger(__name__)


def suspend_user(user: User, reason: str, *, actor: User | None = None, details: dict | None = None) -> User:
    """Suspend `user` at once everywhere: every request of theirs is refused with `reason` from now on
    (pages, JSON, SSE, the API; accounts.standing), and once this commits `account_suspended` is sent,
    so their open WebSockets close with the reason and the answers being written for them stop
    (chat.suspension). Their sessions are kept only to show them why (they can do nothing else) and
    end when the suspension is lifted (reinstate_user).

    `actor` is the staff member, or None for the system (an automatic suspension); either way it goes
    in the audit log."""
    reason = reason.strip()
    if not reason:
        raise ValueError("Give a reason: the user is shown it when they try to sign in.")
    user.is_suspended = True
    user.suspended_reason = reason[:500]
    user.suspended_at = timezone.now()
    user.save(update_fields=["is_suspended", "suspended_reason", "suspended_at"])
    audit.record(actor, "user.suspend", user, reason, details=details)
    transaction.on_commit(lambda: account_suspended.send(sender=User, user=user))
    return user


def reinstate_user(user: User, *, actor: User | None = None, reason: str = "") -> User:
    """Lift a suspension. Every session of theirs from before it ends now (they sign in again): while
    suspended a session could only show them why; lifting the suspension must not hand it back, to
    them or to whoever else held it."""
    if user.is_suspended:
        user.sessions_ended_at = timezone.now()
    user.is_suspended = False
    user.suspended_reason = ""
    user.suspended_at = None
    user.save(update_fields=["is_suspended", "suspended_reason", "suspended_at", "sessions_ended_at"])
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
