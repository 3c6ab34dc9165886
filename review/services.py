"""Staff review of flags: the moderation queue's decisions (uphold, dismiss, hide a message, warn,
suspend for a period, ban, delete a flag) and the automatic suspension after repeated upheld flags.

Above chat and accounts: these act on users' messages and accounts, and each is recorded in the audit
log. The flags themselves are opened below, by the content policy's screening (moderation.services)
and by users' reports (chat.reports); the queue's pages are review/admin.py.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from accounts import services as accounts
from accounts.models import User
from accounts.preferences import own_language
from accounts.tasks import send_email
from audit import services as audit
from chat.models import Message
from config.refusals import NotAllowed, Refusal
from moderation.models import AccountWarning, Flag

log = logging.getLogger(__name__)


def review_flag(flag: Flag, reviewer: User, state: str, notes: str = "") -> Flag:
    """Staff decide a flag: upheld or dismissed (audited as `flag.uphold` or `flag.dismiss`). Upholding
    the user's Nth flag (N = MODERATION_SUSPEND_AFTER_UPHELD) suspends the account."""
    if state not in (Flag.State.UPHELD, Flag.State.DISMISSED):
        raise ValueError("A flag is reviewed as upheld or dismissed.")
    with transaction.atomic():
        flag.state, flag.reviewer, flag.reviewed_at = state, reviewer, timezone.now()
        if notes.strip():
            flag.notes = notes.strip()
        flag.save(update_fields=["state", "reviewer", "reviewed_at", "notes"])
        verb = "uphold" if state == Flag.State.UPHELD else "dismiss"
        audit.record(reviewer, f"flag.{verb}", flag, flag.notes, details={"message_id": flag.message_id})
        if state == Flag.State.UPHELD and flag.user is not None:
            suspend_if_repeated(flag.user)
    return flag


class FlagDeletionRefused(NotAllowed):
    code = "flag_deletion_refused"


def may_delete_flags(actor: User | None) -> bool:
    """A flag is the only copy of what was blocked, so only a superuser deletes one."""
    return actor is not None and actor.is_active and actor.is_superuser


def delete_flags(actor: User, flags: list[Flag]) -> int:
    """Delete flags (superusers only), each deletion in the audit log as `flag.delete` with the flag's
    id and the user it concerned (not its text: removing that may be why it is deleted)."""
    if not may_delete_flags(actor):
        raise FlagDeletionRefused("Only a superuser can delete a flag: it is the only copy of what was blocked.")
    with transaction.atomic():
        for flag in flags:
            audit.record(
                actor,
                "flag.delete",
                flag,
                details={
                    "flag_id": flag.pk,
                    "user_id": flag.user_id,
                    "user_email": flag.user.email if flag.user is not None else "",
                    "message_id": flag.message_id,
                    "source": flag.source,
                    "category": flag.category,
                    "blocked": flag.blocked,
                    "state": flag.state,
                },
            )
        deleted, _by_model = Flag.objects.filter(pk__in=[flag.pk for flag in flags]).delete()
    return deleted


#: What a hidden message says in its place, to its owner and on a shared page. Saved with the message by
#: staff's action (Message.error): kept in English, marked for the catalogue, so the page can translate it.
HIDDEN_NOTICE = gettext_noop("This message was removed by our moderators because it broke the content policy.")


def hide_message(flag: Flag, reviewer: User, notes: str = "") -> Flag:
    """Uphold `flag` and take its message out of everyone's sight but staff's: the owner's chat and
    exports, shared pages and the context later turns send to the model. The message becomes
    `blocked` with empty content (as an answer cut mid-stream does, so every reader already withholds
    it); the text stays on the flag for staff. Audited as `message.hide`."""
    with transaction.atomic():
        message = Message.objects.select_for_update().filter(pk=flag.message_id).first()
        if message is None:
            raise NotHidable("This flag's message no longer exists: its owner deleted it.")
        if message.is_active:
            raise NotHidable("This answer is still being written; hide it once it has ended.")
        if not flag.text and message.content:
            flag.text = message.content
            flag.save(update_fields=["text"])
        previous = message.status
        message.content, message.status, message.error = "", Message.Status.BLOCKED, HIDDEN_NOTICE
        message.save(update_fields=["content", "status", "error"])
        audit.record(
            reviewer,
            "message.hide",
            message,
            notes,
            details={"flag_id": flag.pk, "conversation_id": message.conversation_id, "status_before": previous},
        )
        review_flag(flag, reviewer, Flag.State.UPHELD, notes)
    return flag


class NotHidable(Refusal):
    status, code = 409, "not_hidable"


def warn_user(user: User, text: str, *, reviewer: User, flags: list[Flag]) -> AccountWarning:
    """Warn `user` about what they wrote: the flags are upheld, the warning waits on their chat page
    until they dismiss it, and it is emailed to them once this commits. Audited as `user.warn`."""
    text = text.strip()
    if not text:
        raise ValueError("Write the warning: the user reads it word for word.")
    with transaction.atomic():
        warning = AccountWarning.objects.create(
            user=user, flag=flags[0] if flags else None, text=text, issued_by=reviewer
        )
        audit.record(reviewer, "user.warn", user, text, details={"flags": [f.pk for f in flags]})
        for flag in flags:
            review_flag(flag, reviewer, Flag.State.UPHELD)
    transaction.on_commit(lambda: _email_warning(user, text))
    return warning


def _email_warning(user: User, text: str) -> None:
    with translation.override(own_language(user)):
        body = _(
            "Our moderators looked at something you wrote on %(site)s and are warning you:\n\n"
            "%(warning)s\n\nIf this happens again your account may be suspended. If you think this is a mistake, "
            "reply to this email and a person will look at it."
        ) % {"site": settings.SITE_NAME, "warning": text}
        subject = settings.ACCOUNT_EMAIL_SUBJECT_PREFIX + _("A warning from our moderators")
    send_email.delay(subject, body, settings.DEFAULT_FROM_EMAIL, [user.email])


def check_may_suspend_for_flags(
    reviewer: User, by_user: dict[User, list[Flag]], reason: str, *, ban: bool = False, days: int | None = None
) -> None:
    """Refuse a suspension (or ban) from the queue as a whole when `reviewer` may not suspend one of these
    users (accounts.services.may_suspend: staff only by a superuser), each refused attempt in the audit
    log with its flags. The queue asks it for the whole selection before its transaction opens, so
    one refusal changes nothing and stays on record."""
    refused = [
        refused_user
        for user, flags in by_user.items()
        for refused_user in accounts.refuse_suspensions(
            reviewer,
            [user],
            ban=ban,
            reason=reason.strip(),
            details={"flags": [f.pk for f in flags], **({} if ban else {"days": days})},
        )
    ]
    if refused:
        raise accounts.SuspensionRefused.of(refused, ban=ban)


def suspend_for_flags(user: User, reason: str, *, reviewer: User, flags: list[Flag], days: int | None) -> User:
    """Suspend `user` over these flags, for `days` (None: until staff lift it), and uphold them. Staff
    are suspended only by a superuser: asked before the transaction, so a refusal stays on record."""
    if days is not None and days <= 0:
        raise ValueError("A suspension for a period lasts at least a day.")
    check_may_suspend_for_flags(reviewer, {user: flags}, reason, days=days)
    until = timezone.now() + timedelta(days=days) if days is not None else None
    with transaction.atomic():
        accounts.suspend_user(user, reason, actor=reviewer, until=until, details={"flags": [f.pk for f in flags]})
        for flag in flags:
            review_flag(flag, reviewer, Flag.State.UPHELD)
    return user


def ban_for_flags(user: User, reason: str, *, reviewer: User, flags: list[Flag]) -> User:
    """Ban `user` over these flags (accounts.services.ban_user), and uphold them. Staff are banned
    only by a superuser: asked before the transaction, so a refusal stays on record."""
    check_may_suspend_for_flags(reviewer, {user: flags}, reason, ban=True)
    with transaction.atomic():
        accounts.ban_user(user, reason, actor=reviewer, details={"flags": [f.pk for f in flags]})
        for flag in flags:
            review_flag(flag, reviewer, Flag.State.UPHELD)
    return user


def suspend_if_repeated(user: User) -> bool:
    """Suspend `user` once they have MODERATION_SUSPEND_AFTER_UPHELD upheld flags; returns whether it did."""
    limit = settings.MODERATION_SUSPEND_AFTER_UPHELD
    if limit <= 0 or user.is_suspended:
        return False
    flag_ids = list(
        Flag.objects.filter(user=user, state=Flag.State.UPHELD)
        .exclude(source=Flag.Source.USER_REPORT)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    upheld = len(flag_ids)
    if upheld < limit:
        return False
    rule = {"rule": "MODERATION_SUSPEND_AFTER_UPHELD", "limit": limit, "upheld_flags": upheld, "flags": flag_ids}
    # Staff are suspended only by a superuser: upholding flags must not lock an administrator out. The
    # flag stays upheld; the suspension the rule asked for is recorded as refused.
    if accounts.refuse_suspensions(None, [user], reason="Staff are not suspended automatically.", details=rule):
        return False
    # The audit entry names the rule and the flags that met it, so staff can check the decision.
    # Saved as the suspension's reason, which staff read too: kept in English, marked for the catalogue.
    reason = gettext_noop(
        "Suspended automatically: %(count)s of your messages or answers broke the content "
        "policy. Write to support if you think this is a mistake."
    )
    accounts.suspend_user(user, reason % {"count": upheld}, details=rule)
    log.info("user %s suspended after %d upheld flags", user.pk, upheld)
    return True
