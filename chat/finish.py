"""The end of a generation: final state, settlement, and telling every open tab.

Shared by the runner (an answer that ended) and the reaper (an answer whose runner died), so
both write the same things in the same order and billing is settled exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone

from billing import services as billing
from chat.models import Message
from chat.serializers import message_json
from chat.streams import DONE, get_streams
from chat.tokens import estimate_tokens
from moderation.services import screen_output


@dataclass
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Outcome:
    status: str = ""
    error: str = ""
    ttft_ms: int | None = None
    usage: Usage | None = None
    finish_reason: str = ""
    #: The prompt size as estimated when the request was made (used when the engine never said).
    prompt_estimate: int = 0


def user_group(user_id: int) -> str:
    return f"chat.user.{user_id}"


async def announce(user_id: int, conversation_id: int, message_id: int, *, active: bool) -> None:
    """Tell every open tab of the user that a generation started or ended."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(user_group(user_id), {
            "type": "chat.generating", "conversation_id": conversation_id, "message_id": message_id, "active": active,
        })


def mark_streaming(message_id: int, node: str) -> None:
    Message.objects.filter(pk=message_id, status=Message.Status.PENDING).update(
        status=Message.Status.STREAMING, node=node
    )


def checkpoint(message_id: int, text: str) -> None:
    """Keep the text so far on an unfinished answer (the reaper's fallback if the stream is gone)."""
    Message.objects.filter(pk=message_id, status__in=Message.ACTIVE_STATUSES).update(content=text)


def save_final(message_id: int, reservation, text: str, outcome: Outcome) -> Message | None:
    """Write the answer's final state and settle its usage. Returns None if the message is gone."""
    with transaction.atomic():
        message = Message.objects.select_for_update().select_related("conversation").filter(pk=message_id).first()
        if message is None:
            billing.release(reservation)
            return None
        status = outcome.status
        if status == Message.Status.COMPLETED and not screen_output(message.conversation.owner, text).allowed:
            status, outcome.error, text = Message.Status.BLOCKED, "This answer was withheld by the content policy.", ""
        usage = outcome.usage or Usage(prompt_tokens=outcome.prompt_estimate, completion_tokens=estimate_tokens(text))
        message.content = text
        message.status = status
        message.error = outcome.error
        message.prompt_tokens = usage.prompt_tokens
        message.cached_tokens = usage.cached_tokens
        message.completion_tokens = usage.completion_tokens
        if outcome.ttft_ms is not None:
            message.ttft_ms = outcome.ttft_ms
        message.finished = timezone.now()
        message.save()
        billing.settle(
            reservation, prompt_tokens=usage.prompt_tokens, cached_tokens=usage.cached_tokens,
            completion_tokens=usage.completion_tokens, model=message.model, node=message.node,
            conversation_id=message.conversation_id, generation_id=message.pk,
        )
    return message


async def complete(message_id: int, reservation, text: str, outcome: Outcome) -> Message | None:
    """Save, settle, close the token stream with a "done" frame, and announce the end."""
    if outcome.status == "gone":
        await sync_to_async(billing.release)(reservation)
        await get_streams().finish(message_id)
        return None
    message = await sync_to_async(save_final)(message_id, reservation, text, outcome)
    streams = get_streams()
    if message is None:
        await streams.finish(message_id)
        return None
    payload = await sync_to_async(message_json)(message)
    await streams.append(message_id, DONE, {"message": payload})
    await streams.finish(message_id)
    await announce(message.conversation.owner_id, message.conversation_id, message_id, active=False)
    if message.status == Message.Status.COMPLETED:
        from chat.tasks import after_answer

        await sync_to_async(after_answer.delay)(message.conversation_id)
    return message
