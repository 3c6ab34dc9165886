"""A user reports one of their answers to staff: it opens a flag (moderation.models.Flag) in the
moderation queue, where staff review it (review.services). Every rule about what may be reported is
decided here; the JSON endpoint (chat.api.report_message) only adapts."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from accounts.models import User
from chat import selectors as chat_selectors
from chat.generation.turn import check_account
from chat.models import Message
from config import metrics
from config.refusals import BadInput, Refusal
from config.text import grouped
from moderation.models import Flag

REPORT_REASON_MAX = 1000


class NotReportable(Refusal):
    status, code = 409, "not_reportable"


def report_answer(user: User, message_id: int, reason: object = "") -> tuple[Flag, bool]:
    """A user reports one of their answers to staff; reporting again changes nothing. Returns the flag
    and whether it is new."""
    check_account(user)
    if not isinstance(reason, str):
        raise BadInput("reason must be text.")
    reason = reason.strip()
    if len(reason) > REPORT_REASON_MAX:
        raise BadInput(_("Keep the reason under %(limit)s characters.") % {"limit": grouped(REPORT_REASON_MAX)})
    message = chat_selectors.get_message(user, message_id)  # another user's answer is "not found"
    if message.role != Message.Role.ASSISTANT:
        raise BadInput(_("Only answers can be reported."))
    if message.is_active:
        raise NotReportable(_("This answer is still being written; report it once it has ended."))
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
