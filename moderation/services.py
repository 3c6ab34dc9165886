"""The content policy's screening, which every message passes through, and the flags it records.

`screen_input` judges what a user sends before anything is reserved or sent to an engine (called by
`chat.generation.admit`); an `OutputScreen` judges a streaming answer in windows of about
MODERATION_WINDOW_CHARS characters and once more at the end (used by the chat runner and the API
stream). Both run the backends named in MODERATION_BACKENDS, in order: the first one that blocks
decides; hits that only flag are recorded and let through. A backend that errors or times out is
logged, counted, and MODERATION_FAIL_MODE decides ("open": let it through; "closed": refuse it).

What screening finds is recorded here as flags, for staff to review (the moderation queue: the
`review` app, above chat, which reads them; users' reports of answers are opened by chat.reports).
This module imports nothing of chat: the chat's path calls it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop

from accounts.models import User
from config import metrics, tracing
from config.refusals import Busy, NotFound, Refusal
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
    """A refused message's sentence, in the language of the request that sent it."""
    return _(
        "This message was not sent: it goes against the content policy (%(category)s). Change it and send it again."
    ) % {"category": category}


# An answer's screening runs on the event loop outside any request, and its reason is saved with the answer
# (Message.error): kept in English, marked for the catalogue (gettext_noop), so the page can show it translated.
OUTPUT_REASON = gettext_noop("This answer was stopped and withheld because it went against the content policy.")
UNAVAILABLE_INPUT = gettext_lazy(
    "Messages cannot be checked against the content policy right now. Try again in a minute."
)
UNAVAILABLE_OUTPUT = gettext_noop("This answer was withheld: it could not be checked against the content policy.")


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
    with tracing.span("moderation input") as span:
        verdict = screen_input(user, text)
        _record_verdict(span, INPUT, verdict, upto=len(text))
    if verdict.unavailable:
        raise ModerationUnavailable(verdict.reason, retry_after=60)
    if not verdict.allowed:
        raise ContentBlocked(verdict.reason, category=verdict.category)


def _record_verdict(span, source: str, verdict: Verdict | None, *, upto: int) -> None:
    """What a trace says of one screening: where, up to which character, and the decision (never the text)."""
    refused = verdict is not None and not verdict.allowed
    decision = "allowed" if not refused else "unavailable" if verdict.unavailable else "blocked"
    tracing.record(
        span,
        {
            "sglchat.moderation.source": source,
            "sglchat.moderation.checked_chars": upto,
            "sglchat.moderation.decision": decision,
            "sglchat.moderation.category": (verdict.category or None) if refused else None,
            "sglchat.moderation.backend": (verdict.backend or None) if refused else None,
        },
    )


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
        with tracing.span("moderation window") as span:
            if self._backends is None:
                self._backends = await database_sync_to_async(self._prepare, thread_sensitive=False)()
            for backend in self._backends:
                try:
                    if backend.blocking:
                        hits = await asyncio.wait_for(
                            asyncio.to_thread(backend.screen, segment, OUTPUT),
                            settings.MODERATION_TIMEOUT_SECONDS + 0.5,
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
            _record_verdict(span, OUTPUT, self.verdict, upto=self.checked_upto)
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


# --- warnings: the user's side ---------------------------------------------------------------------


def mark_warning_seen(user: User, warning_id: int) -> AccountWarning:
    """The user read a warning and dismissed it (another user's warning is "not found")."""
    warning = AccountWarning.objects.filter(pk=warning_id, user=user).first()
    if warning is None:
        raise NotFound(_("There is no such warning."))
    if warning.seen_at is None:
        warning.seen_at = timezone.now()
        warning.save(update_fields=["seen_at"])
    return warning
