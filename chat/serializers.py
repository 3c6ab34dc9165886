"""JSON shapes of conversations and messages, as docs/chat-protocol.md describes them."""

from django.urls import reverse
from django.utils.translation import gettext

from chat.models import AnswerFeedback, Conversation, Message
from documents.selectors import files_of_conversation
from documents.serializers import document_json, picture_url


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def conversation_json(conversation: Conversation, *, generating: bool | None = None, detail: bool = False) -> dict:
    """`detail` adds the conversation's own system prompt and its files (one conversation's answers, not
    the sidebar's list)."""
    if generating is None:
        generating = getattr(conversation, "generating", None)
    if generating is None:
        generating = conversation.messages.filter(status__in=Message.ACTIVE_STATUSES).exists()
    data = {
        "id": conversation.pk,
        "title": conversation.title,
        "model": conversation.model,
        "pinned": conversation.pinned,
        "archived": conversation.archived,
        "created": _iso(conversation.created),
        "updated": _iso(conversation.updated),
        "generating": bool(generating),
        # Whether it has its own system prompt (the chat page's header shows a sign); the prompt itself
        # only with `detail`.
        "has_system_prompt": bool(conversation.system_prompt),
    }
    if detail:
        data["system_prompt"] = conversation.system_prompt
        data["documents"] = [document_json(d) for d in files_of_conversation(conversation)]
        data["collection_ids"] = sorted(conversation.collections.values_list("pk", flat=True))
    return data


def feedback_json(feedback: AnswerFeedback | None) -> dict | None:
    if feedback is None:
        return None
    return {
        "rating": feedback.rating,
        "comment": feedback.comment,
        "created": _iso(feedback.created),
        "updated": _iso(feedback.updated),
    }


def message_json(message: Message) -> dict:
    siblings = getattr(message, "sibling_ids", None)
    if siblings is None:
        siblings = list(
            Message.objects.filter(conversation_id=message.conversation_id, parent_id=message.parent_id)
            .order_by("created", "id")
            .values_list("id", flat=True)
        )
    return {
        "id": message.pk,
        "conversation_id": message.conversation_id,
        "role": message.role,
        "content": message.content,
        "status": message.status,
        "model": message.model,
        "parent_id": message.parent_id,
        "created": _iso(message.created),
        "finished": _iso(message.finished),
        "prompt_tokens": message.prompt_tokens,
        "cached_tokens": message.cached_tokens,
        "completion_tokens": message.completion_tokens,
        "ttft_ms": message.ttft_ms,
        # Saved in English by the runner (outside any request); a known note is read in the person's language.
        "error": gettext(message.error) if message.error else "",
        "sources": message.sources,
        # "similar": the answer to an earlier, similar question (the page offers to answer afresh).
        "cache_hit": message.cache_hit,
        # Why Auto chose `model` ("" when the person chose it): the page offers the larger model.
        "auto_route": message.auto_route,
        # "length": cut at the answer's token limit; `can_continue`: the page offers to write on from it.
        "finish_reason": message.finish_reason,
        "can_continue": message.can_continue,
        "images": [{"id": i, "url": picture_url(i)} for i in message.images],
        "siblings": siblings,
        # The user's rating, when the message was loaded with it (chat.feedback.selectors.attach_feedback);
        # never a query here: message_json also runs on the event loop when an answer ends.
        "feedback": feedback_json(getattr(message, "user_feedback", None)),
        "stream_url": (
            reverse("chat:message-stream", args=[message.pk]) if message.role == Message.Role.ASSISTANT else None
        ),
    }
