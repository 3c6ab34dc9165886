"""Writes to accounts: suspension, reinstatement and deleting one's account. Views, admin actions and
tasks call these.

The audit log records who (staff, or the system), when and why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import ApiKey, User
from accounts.signals import account_suspended
from audit import services as audit
from billing.services.quota import anonymise_usage
from billing.services.subscriptions import cancel_now
from config.refusals import NotAllowed

logger = logging.getLogger(__name__)


class SuspensionRefused(NotAllowed):
    code = "suspension_refused"

    @classmethod
    def of(cls, refused: list[User], *, ban: bool = False) -> SuspensionRefused:
        emails = ", ".join(user.email for user in refused)
        return cls(
            f"Only a superuser can suspend or ban staff ({emails}). Nobody was {'banned' if ban else 'suspended'}; "
            "the attempt is recorded in the audit log."
        )


def may_suspend(actor: User | None, user: User) -> bool:
    """The one rule of who may suspend or ban whom (the permission to suspend at all is the admin's
    `accounts.suspend_user`). Staff accounts, superusers included, are suspended or banned only by a
    superuser: a moderator who could suspend them could lock every administrator out. The system's
    automatic suspension (`actor` None) never suspends staff either."""
    return not user.is_staff or (actor is not None and actor.is_superuser)


def refuse_suspensions(
    actor: User | None,
    users: Iterable[User],
    *,
    ban: bool = False,
    reason: str = "",
    details: dict | None = None,
) -> list[User]:
    """The users of `users` that `actor` may not suspend (or ban), each refused attempt recorded in
    the audit log: who tried what on whom, with the reason they gave."""
    refused = [user for user in users if not may_suspend(actor, user)]
    tried = "ban" if ban else "suspend"
    for user in refused:
        audit.record(actor, f"user.{tried}.refused", user, reason, details={**(details or {}), "tried": tried})
    return refused


def check_may_suspend(
    actor: User | None,
    users: Iterable[User],
    *,
    ban: bool = False,
    reason: str = "",
    details: dict | None = None,
) -> None:
    """Refuse the whole suspension (or ban) when `actor` may not suspend one of `users`; the refused
    attempt is in the audit log (refuse_suspensions).

    suspend_user and ban_user ask it themselves. A caller that applies a selection all or none inside
    one transaction asks it before opening that transaction, so the record of the refusal is not
    rolled back with the rest."""
    refused = refuse_suspensions(actor, users, ban=ban, reason=reason, details=details)
    if refused:
        raise SuspensionRefused.of(refused, ban=ban)


def suspend_user(
    user: User,
    reason: str,
    *,
    actor: User | None = None,
    details: dict | None = None,
    until: datetime | None = None,
) -> User:
    """Suspend `user` at once everywhere: every request of theirs is refused with `reason` from now on
    (pages, JSON, SSE, the API; accounts.standing), and once this commits `account_suspended` is sent,
    so their open WebSockets close with the reason and the answers being written for them stop
    (chat.suspension). Their sessions are kept only to show them why (they can do nothing else) and
    end when the suspension is lifted (reinstate_user).

    With `until`, the suspension is for a period: `end_expired_suspensions` lifts it once that time
    has passed (within a minute: it runs on the beat). Without it, staff lift it.

    `actor` is the staff member, or None for the system (an automatic suspension); either way it goes
    in the audit log. Staff are suspended only by a superuser (check_may_suspend)."""
    reason = reason.strip()
    if not reason:
        raise ValueError("Give a reason: the user is shown it when they try to sign in.")
    check_may_suspend(actor, [user], reason=reason, details=details)
    now = timezone.now()
    if until is not None and until <= now:
        raise ValueError("A suspension for a period must end in the future.")
    user.is_suspended = True
    user.suspended_reason = reason[:500]
    user.suspended_at = now
    user.suspended_until = until
    user.save(update_fields=["is_suspended", "suspended_reason", "suspended_at", "suspended_until"])
    if until is not None:
        details = {**(details or {}), "until": until.isoformat()}
    audit.record(actor, "user.suspend", user, reason, details=details)
    transaction.on_commit(lambda: account_suspended.send(sender=User, user=user))
    return user


def ban_user(user: User, reason: str, *, actor: User | None, details: dict | None = None) -> User:
    """Close the account for good: suspended with no end, every API key revoked, and a live
    subscription cancelled at once at its provider (so a banned person is not charged again). The
    provider is asked first: if it does not answer, Busy is raised and nothing has changed. Only a
    superuser can lift a ban (reinstate_user), and only a superuser bans staff (check_may_suspend)."""
    reason = reason.strip()
    if not reason:
        raise ValueError("Give a reason: the user is shown it when they try to sign in.")
    check_may_suspend(actor, [user], ban=True, reason=reason, details=details)
    canceled = cancel_now(user, why="ban")
    now = timezone.now()
    with transaction.atomic():
        revoked = ApiKey.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=now)
        user.banned_at = now
        user.save(update_fields=["banned_at"])
        # suspend_user records the suspension (and sends its event on commit); the ban is its own entry.
        suspend_user(user, reason, actor=actor, details=details)
        audit.record(
            actor,
            "user.ban",
            user,
            reason,
            details={**(details or {}), "api_keys_revoked": revoked, "subscriptions_canceled": len(canceled)},
        )
    return user


class BanLiftRefused(NotAllowed):
    code = "ban_lift_refused"


def reinstate_user(user: User, *, actor: User | None = None, reason: str = "") -> User:
    """Lift a suspension (or a ban: superusers only). Every session of theirs from before it ends now
    (they sign in again): while suspended a session could only show them why; lifting the suspension
    must not hand it back, to them or to whoever else held it. API keys revoked by a ban stay revoked."""
    if user.banned_at is not None and not (actor is not None and actor.is_superuser):
        raise BanLiftRefused("Only a superuser can lift a ban.")
    if user.is_suspended:
        user.sessions_ended_at = timezone.now()
    was_banned = user.banned_at is not None
    user.is_suspended = False
    user.suspended_reason = ""
    user.suspended_at = None
    user.suspended_until = None
    user.banned_at = None
    user.save(
        update_fields=[
            "is_suspended",
            "suspended_reason",
            "suspended_at",
            "suspended_until",
            "banned_at",
            "sessions_ended_at",
        ]
    )
    audit.record(actor, "user.reinstate", user, reason, details={"ban_lifted": True} if was_banned else None)
    return user


def end_expired_suspensions(now: datetime | None = None) -> list[int]:
    """Lift every suspension whose period has ended (the system does it, in the audit log). Runs on the
    beat every minute; returns the ids of the users reinstated."""
    now = now or timezone.now()
    reinstated = []
    due = User.objects.filter(is_suspended=True, suspended_until__lte=now, banned_at__isnull=True)
    for user in due.order_by("pk"):
        with transaction.atomic():
            # Read again under a lock: staff may have changed the suspension since the query above.
            user = User.objects.select_for_update().get(pk=user.pk)
            if not user.is_suspended or user.suspended_until is None or user.suspended_until > now:
                continue
            reinstate_user(user, reason="The suspension's period ended.")
        reinstated.append(user.pk)
        logger.info("suspension of user %s ended by itself", user.pk)
    return reinstated


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
        raise NotAllowed(
            _("Your account has no password yet. Set one under Account → Password, then confirm the deletion with it.")
        )
    if not user.check_password(password):
        raise NotAllowed(_("That password is not right. Your account was not deleted."))
    canceled = cancel_now(user)
    with transaction.atomic():
        anonymous_id, rows = anonymise_usage(user)
        user_id = user.pk
        user.delete()
    # The audit trail: no email or name, only what accounting can match against the ledger.
    logger.info(
        "account %s deleted by its owner: %s usage rows kept as %s, %s subscriptions cancelled",
        user_id,
        rows,
        anonymous_id,
        len(canceled),
    )
    return DeletedAccount(anonymous_id=anonymous_id, usage_rows=rows, subscriptions_canceled=len(canceled))
