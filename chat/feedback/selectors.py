"""Reads of answer feedback: a user's ratings on the messages of a page, and the rows to export."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from django.db.models import QuerySet

from chat.models import AnswerFeedback, Message

#: The statuses of an answer that may be rated: it has ended and has text the user saw.
RATABLE_STATUSES = (Message.Status.COMPLETED, Message.Status.STOPPED)


def is_ratable(message: Message) -> bool:
    return message.role == Message.Role.ASSISTANT and message.status in RATABLE_STATUSES


def attach_feedback(user_id: int, messages: Iterable[Message]) -> None:
    """Give each message its `user_feedback` (the user's rating, or None), in one query for all of
    them (none when no message on the page can be rated); message_json reads it."""
    ratable = [m for m in messages if is_ratable(m)]
    for message in messages:
        message.user_feedback = None
    if not ratable:
        return
    found = {
        f.message_id: f for f in AnswerFeedback.objects.filter(user_id=user_id, message_id__in=[m.pk for m in ratable])
    }
    for message in ratable:
        message.user_feedback = found.get(message.pk)


def feedback_on(user_id: int, message_id: int) -> AnswerFeedback | None:
    return AnswerFeedback.objects.filter(user_id=user_id, message_id=message_id).first()


def feedback_to_export(*, since: datetime.datetime | None = None) -> QuerySet[AnswerFeedback]:
    """Every rating (given or last changed at `since` or later), oldest first, with its answer and
    conversation: what chat.feedback.export turns into records."""
    rows = AnswerFeedback.objects.select_related("message__conversation").order_by("created", "pk")
    if since is not None:
        rows = rows.filter(updated__gte=since)
    return rows
