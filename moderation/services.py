"""The moderation hook every message passes through, and the writes of flags.

`screen_input` judges what a user sends before anything is reserved or sent to an engine (called by
`chat.generation.admit`); an `OutputScreen` judges a streaming answer in windows of about
MODERATION_WINDOW_CHARS characters and once more at the end (used by the chat runner and the API
stream). Both run the backends named in MODERATION_BACKENDS, in order: the first one that blocks
decides; hits that only flag are recorded and let through. A backend that errors or times out is
logged, counted, and MODERATION_FAIL_MODE decides ("open": let it through; "closed": refuse it).

Flags are written here too: by blocks, by users reporting an answer, and by staff reviewing them
(upholding enough of one user's flags suspends the account through `accounts.services`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from datetime import timedelta

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts import services as accounts
from accounts.models import User
from accounts.tasks import send_email
from audit import services as audit
from chat.models import Message
from config import metrics
from config.refusals import Busy, NotAllowed, NotFound, Refusal
from moderation.backends import INPUT, OUTPUT, Backend, Hit, load
from moderation.models import AccountWarning, Flag

log = logging.getLogger(__name__)

#: Characters of already-screened text each window repeats, so a phrase across two windows is seen.
WINDOW_OVERLAP_CHARS = 100
UNAVAILABLE = "unavailable"


class ContentBlocked(Refusal):
    """What the user sent is refused by the content policy (OpenAI's code for it)."""

    status, code = 400, "content_policy_violation"


class ModerationUnavailable(Busy):
    """A backend could not judge and the fail mode is "closed"."""

    code = "moderation_unavailable"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""
    category: str = ""
    score: float | None = None
    backend: str = ""
    #: Refused because a backend could not judge (fail-closed), not because of what the text says.
    unavailable: bool = False
    #: Categories that only flag: the text is allowed, and staff get a flag.
    flagged: tuple[Hit, ...] = ()


ALLOW = Verdict(allowed=True)


def backends_named() -> list[str]:
    return [name.strip() for name in settings.MODERATION_BACKENDS if name.strip()]


def backends() -> list[Backend]:
    return [load(name) for name in backends_named()]


def input_reason(category: str) -> str:
    return f"This message was not sent: it goes against the content policy ({category}). Change it and send it again."


OUTPUT_REASON = "This answer was stopped and withheld because it went against the content policy."
UNAVAILABLE_INPUT = "Messages cannot be checked against the content policy right now. Try again in a minute."
UNAVAILABLE_OUTPUT = "This answer was withheld: it could not be checked against the content policy."


def _failed(backend: Backend, stage: str, exc: BaseException) -> Verdict | None:
    """A backend that could not judge: logged and counted; a refusal when the fail mode is closed."""
    log.warning(
        "moderation backend %s failed on %s (%s): %s",
        backend.name,
        stage,
        settings.MODERATION_FAIL_MODE,
        exc or type(exc).__name__,
    )
    metrics.MODERATION_VERDICTS.labels(stage, backend.name, "error").inc()
    if settings.MODERATION_FAIL_MODE == "closed":
        return Verdict(
            allowed=False,
            reason=UNAVAILABLE_INPUT if stage == INPUT else UNAVAILABLE_OUTPUT,
            category=UNAVAILABLE,
            backend=backend.name,
            unavailable=True,
        )
    return None


def _decide(backend: Backend, stage: str, hits: list[Hit], flagged: list[Hit]) -> Verdict | None:
    blocking = [h for h in hits if h.block]
    if blocking:
        hit = blocking[0]
        metrics.MODERATION_VERDICTS.labels(stage, backend.name, "block").inc()
        reason = input_reason(hit.category) if stage == INPUT else OUTPUT_REASON
        return Verdict(
            allowed=False,
            reason=reason,
            category=hit.category,
            score=hit.score,
            backend=backend.name,
            flagged=tuple(flagged),
        )
    new = [h for h in hits if h.category not in {f.category for f in flagged}]
    if new:
        metrics.MODERATION_VERDICTS.labels(stage, backend.name, "flag").inc()
        flagged.extend(new)
    else:
        metrics.MODERATION_VERDICTS.labels(stage, backend.name, "allow").inc()
    return None


def judge(text: str, stage: str) -> Verdict:
    """Run every backend on `text` (synchronously: call from a thread, never the event loop)."""
    flagged: list[Hit] = []
    for backend in backends():
        try:
            backend.prepare(stage)
            hits = backend.screen(text, stage)
        except Exception as exc:
            verdict = _failed(backend, stage, exc)
        else:
            verdict = _decide(backend, stage, hits, flagged)
        if verdict is not None:
            return verdict
    return Verdict(allowed=True, flagged=tuple(flagged)) if flagged else ALLOW


def screen_input(user: User, text: str) -> Verdict:
    """Judge what a user asks before it reaches a model; a block or a flag is recorded for staff."""
    verdict = judge(text, INPUT)
    if not verdict.unavailable:
        record(verdict, user=user, text=text, source=Flag.Source.INPUT)
    return verdict


def check_input(user: User, text: str) -> None:
    """Raise the refusal for a message the content policy does not let through."""
    verdict = screen_input(user, text)
    if verdict.unavailable:
        raise ModerationUnavailable(verdict.reason, retry_after=60)
    if not verdict.allowed:
        raise ContentBlocked(verdict.reason, category=verdict.category)


def record(verdict: Verdict, *, user: User | None, text: str, source: str, message_id: int | None = None) -> list[Flag]:
    """The flags a verdict asks for: one for a block, one per category that only flags."""
    flags = []
    if not verdict.allowed and not verdict.unavailable:
        flags.append(
            Flag(
                user=user,
                message_id=message_id,
                source=source,
                category=verdict.category,
                score=verdict.score,
                backend=verdict.backend,
                blocked=True,
                text=text,
            )
        )
    flags += [
        Flag(
            user=user,
            message_id=message_id,
            source=source,
            category=hit.category,
            score=hit.score,
            backend=hit.backend,
            text=text,
        )
        for hit in verdict.flagged
    ]
    return Flag.objects.bulk_create(flags) if flags else []


@dataclass
class OutputScreen:
    """Screens one streaming answer: `due` says when a window is full, `check` judges the text since
    the last window (with some overlap). The first block is kept in `verdict`; hits that only flag
    are collected for `finish`. No database or cache round trip per window: the backends are
    prepared once, on the first window, in a thread."""

    window: int = field(default_factory=lambda: settings.MODERATION_WINDOW_CHARS)
    checked_upto: int = 0
    verdict: Verdict | None = None
    flagged: list[Hit] = field(default_factory=list)
    _backends: list[Backend] | None = None

    @property
    def active(self) -> bool:
        return bool(backends_named())

    def due(self, length: int) -> bool:
        return self.active and self.verdict is None and length - self.checked_upto >= self.window

    async def check(self, text: str) -> Verdict | None:
        """Judge what `text` added since the last check; returns the blocking verdict, if any."""
        if not self.active or self.verdict is not None or len(text) <= self.checked_upto:
            return self.verdict
        segment = text[max(0, self.checked_upto - WINDOW_OVERLAP_CHARS) :]
        self.checked_upto = len(text)
        if self._backends is None:
            self._backends = await database_sync_to_async(self._prepare, thread_sensitive=False)()
        for backend in self._backends:
            try:
                if backend.blocking:
                    hits = await asyncio.wait_for(
                        asyncio.to_thread(backend.screen, segment, OUTPUT), settings.MODERATION_TIMEOUT_SECONDS + 0.5
                    )
                else:
                    hits = backend.screen(segment, OUTPUT)
            except Exception as exc:  # TimeoutError included
                verdict = _failed(backend, OUTPUT, exc)
            else:
                verdict = _decide(backend, OUTPUT, hits, self.flagged)
            if verdict is not None:
                self.verdict = verdict
                break
        return self.verdict

    @staticmethod
    def _prepare() -> list[Backend]:
        ready = []
        for backend in backends():
            try:
                backend.prepare(OUTPUT)
            except Exception as exc:
                ready.append(_Broken(backend, exc))
            else:
                ready.append(backend)
        return ready

    async def finish(self, *, user_id: int | None, text: str, message_id: int | None = None) -> None:
        """Record the flags this answer earned (one database trip, only when there are some)."""
        verdict = self.verdict or Verdict(allowed=True, flagged=tuple(self.flagged))
        if verdict.allowed and not verdict.flagged:
            return
        if not verdict.allowed:
            verdict = replace(verdict, flagged=tuple(self.flagged))
        await database_sync_to_async(_record_output)(verdict, user_id, text, message_id)


def _record_output(verdict: Verdict, user_id: int | None, text: str, message_id: int | None) -> None:
    user = User.objects.filter(pk=user_id).first() if user_id is not None else None
    record(verdict, user=user, text=text, source=Flag.Source.OUTPUT, message_id=message_id)


class _Broken:
    """A backend whose preparation failed: every window meets the fail mode."""

    blocking = False

    def __init__(self, backend: Backend, exc: Exception) -> None:
        self.name, self.exc = backend.name, exc

    def screen(self, text: str, stage: str) -> list[Hit]:
        raise self.exc


# --- flags: user reports and staff reviews ----------------------------------------------------------

REPORT_REASON_MAX = 1000


class NotReportable(Refusal):
    status, code = 409, "not_reportable"


def report_answer(user: User, message_id: int, reason: object = "") -> tuple[Flag, bool]:
    """A user reports one of their answers to staff; reporting again changes nothing. Returns the flag
    and whether it is new."""
    from chat import selectors as chat_selectors
    from chat.generation.turn import check_account
    from config.refusals import BadInput

    check_account(user)
    if not isinstance(reason, str):
        raise BadInput("reason must be text.")
    reason = reason.strip()
    if len(reason) > REPORT_REASON_MAX:
        raise BadInput(f"Keep the reason under {REPORT_REASON_MAX:,} characters.")
    message = chat_selectors.get_message(user, message_id)  # another user's answer is "not found"
    if message.role != Message.Role.ASSISTANT:
        raise BadInput("Only answers can be reported.")
    if message.is_active:
        raise NotReportable("This answer is still being written; report it once it has ended.")
    existing = Flag.objects.filter(message=message, reporter=user, source=Flag.Source.USER_REPORT).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            flag = Flag.objects.create(
                message=message,
                user=user,
                reporter=user,
                source=Flag.Source.USER_REPORT,
                text=message.content,
                reason=reason,
            )
    except IntegrityError:  # two tabs at once: the other one's report stands
        return Flag.objects.get(message=message, reporter=user, source=Flag.Source.USER_REPORT), False
    metrics.MODERATION_VERDICTS.labels("report", "user", "flag").inc()
    return flag, True


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
        deleted, _ = Flag.objects.filter(pk__in=[flag.pk for flag in flags]).delete()
    return deleted


#: What a hidden message says in its place, to its owner and on a shared page.
HIDDEN_NOTICE = "This message was removed by our moderators because it broke the content policy."


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
    body = (
        f"Our moderators looked at something you wrote on {settings.SITE_NAME} and are warning you:\n\n"
        f"{text}\n\nIf this happens again your account may be suspended. If you think this is a mistake, "
        "reply to this email and a person will look at it."
    )
    subject = f"{settings.ACCOUNT_EMAIL_SUBJECT_PREFIX}A warning from our moderators"
    send_email.delay(subject, body, settings.DEFAULT_FROM_EMAIL, [user.email])


def mark_warning_seen(user: User, warning_id: int) -> AccountWarning:
    """The user read a warning and dismissed it (another user's warning is "not found")."""
    warning = AccountWarning.objects.filter(pk=warning_id, user=user).first()
    if warning is None:
        raise NotFound("There is no such warning.")
    if warning.seen_at is None:
        warning.seen_at = timezone.now()
        warning.save(update_fields=["seen_at"])
    return warning


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
    accounts.suspend_user(
        user,
        f"Suspended automatically: {upheld} of your messages or answers broke the content "
        "policy. Write to support if you think this is a mistake.",
        details=rule,
    )
    log.info("user %s suspended after %d upheld flags", user.pk, upheld)
    return True


#: Messages shown before the flagged one on its review page (and one after: the answer to a question).
TURNS_BEFORE = 4


def turns_around(flag: Flag) -> list:
    """The flagged message with the turns just before it and the one after, oldest first (a selector:
    reads only). The text staff see here includes what was cut from the user's view."""
    message = flag.message
    if message is None:
        return []
    around = message.conversation.messages.order_by("created", "pk")
    before = list(around.filter(created__lte=message.created).exclude(pk=message.pk).reverse()[:TURNS_BEFORE])
    after = list(around.filter(created__gt=message.created)[:1])
    return [*reversed(before), message, *after]
