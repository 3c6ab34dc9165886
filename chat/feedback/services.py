"""Writes of answer feedback: a user rates one of their finished answers, changes or withdraws it;
staff export the ratings (audited).

Every rule about what may be rated is decided here; the JSON endpoint only adapts.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.models import User
from audit import services as audit
from chat import selectors as chat_selectors
from chat.feedback import selectors
from chat.feedback.export import jsonl_lines
from chat.generation.turn import check_account
from chat.models import AnswerFeedback, Message
from config import metrics
from config.refusals import BadInput, Refusal

COMMENT_MAX = 2000

#: "Leave the comment as it is" (changing only the rating keeps what the user wrote).
KEEP = object()

#: Why an answer that ended without text cannot be rated, by its status.
ENDED_WITHOUT_TEXT = {
    Message.Status.FAILED: gettext_lazy("This answer failed, so it cannot be rated."),
    Message.Status.INTERRUPTED: gettext_lazy("This answer was interrupted, so it cannot be rated."),
    Message.Status.BLOCKED: gettext_lazy("This answer was blocked, so it cannot be rated."),
}
NO_TEXT = gettext_lazy("This answer has no text, so it cannot be rated.")


class NotRatable(Refusal):
    """The message exists and is the user's, but it is not (or not yet) an answer that can be rated."""

    status, code = 409, "not_ratable"


def rate_answer(user: User, message_id: int, rating: object, comment: object = KEEP) -> tuple[AnswerFeedback, bool]:
    """Save the user's rating of an answer (up or down) with an optional comment; returns the
    rating and whether it is new. Rating again changes it: one rating per user and answer."""
    check_account(user)
    if rating not in AnswerFeedback.Rating.values:
        raise BadInput('rating must be "up" or "down".')
    if comment is not KEEP:
        comment = _clean_comment(comment)
    message = chat_selectors.get_message(user, message_id)  # another user's answer is "not found"
    _check_ratable(message)
    changes = {"rating": rating} if comment is KEEP else {"rating": rating, "comment": comment}
    # Two tabs rating at once: the unique constraint keeps one row, update_or_create retries onto it.
    feedback, created = AnswerFeedback.objects.update_or_create(
        message=message,
        user=user,
        defaults=changes,
        create_defaults={"comment": "", **changes},
    )
    metrics.ANSWER_RATINGS.labels(message.model, message.node, rating).inc()
    return feedback, created


def withdraw_rating(user: User, message_id: int) -> bool:
    """Remove the user's rating of an answer; returns whether there was one."""
    check_account(user)
    message = chat_selectors.get_message(user, message_id)
    deleted, _by_model = AnswerFeedback.objects.filter(message=message, user=user).delete()
    return bool(deleted)


def _check_ratable(message: Message) -> None:
    if message.role != Message.Role.ASSISTANT:
        raise BadInput(_("Only answers can be rated, not your own messages."))
    if message.is_active:
        raise NotRatable(_("This answer is still being written. Rate it once it has finished."))
    if not selectors.is_ratable(message):
        raise NotRatable(ENDED_WITHOUT_TEXT.get(message.status, NO_TEXT))


def _clean_comment(comment: object) -> str:
    if comment is None:
        return ""
    if not isinstance(comment, str):
        raise BadInput("comment must be text.")
    comment = comment.strip()
    if len(comment) > COMMENT_MAX:
        raise BadInput(
            _("The comment is %(length)s characters long; the limit is %(limit)s.")
            % {"length": len(comment), "limit": COMMENT_MAX}
        )
    return comment


def export_ratings(actor: User | None, rows: QuerySet[AnswerFeedback], reason: object, *, via: str) -> Iterator[str]:
    """The JSONL lines of `rows` (chat.feedback.export: each record holds the conversation up to the
    rated answer), recorded first in the audit log as `feedback.export` with the row count and the
    reason. Staff must give a reason (audit.services.record_export refuses a blank one); a command run
    on the server (`actor` None) is recorded as the system's, with `via` saying which."""
    count = rows.count()
    audit.record_export(
        actor,
        "feedback.export",
        count,
        reason,
        {"via": via},
        target_type=AnswerFeedback._meta.label_lower,
        require_reason=actor is not None,
    )
    return jsonl_lines(rows.iterator(chunk_size=1000))
