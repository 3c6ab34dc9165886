"""Conversations and messages for tests, built directly (no engine involved)."""

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
