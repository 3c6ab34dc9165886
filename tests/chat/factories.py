"""Conversations and messages for tests, built directly (no engine involved)."""

from datetime import timedelta

from django.utils import timezone

from chat.models import Conversation, Message


def conversation_for(user, **fields) -> Conversation:
    fields.setdefault("model", "sim-small")
    fields.setdefault("system_prompt", "Be brief.")
    return Conversation.objects.create(owner=user, **fields)


def say(conversation, role, content, *, parent=None, status=Message.Status.COMPLETED, **fields) -> Message:
    return Message.objects.create(
        conversation=conversation, role=role, content=content, parent=parent, status=status, **fields
    )


def exchange(conversation, question, answer, *, parent=None):
    q = say(conversation, "user", question, parent=parent)
    a = say(conversation, "assistant", answer, parent=q)
    return q, a


def stalled_answer(
    conversation, text: str, *, reservation: dict, question: str = "What happened?", ago: timedelta | None = None
) -> Message:
    """An answer left `streaming` (with `text` so far) by a runner that is gone, so no heartbeat anywhere:
    what the reaper ends. Like every started answer it has its question, an engine request id and its
    quota reservation; `ago` backdates it."""
    asked = say(conversation, "user", question)
    answer = say(
        conversation,
        "assistant",
        text,
        parent=asked,
        status=Message.Status.STREAMING,
        request_id=f"rid-stalled-{asked.pk}",
        reservation=reservation,
        model="sim-small",
    )
    if ago is not None:
        answer.created = timezone.now() - ago
        Message.objects.filter(pk=answer.pk).update(created=answer.created)
    return answer
