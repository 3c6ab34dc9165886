"""Telling every open tab of a user what changed: a generation started or ended, a conversation
was renamed, pinned or titled. Sent on the channel layer to the user's group, which each of their
WebSocket connections joins (chat.consumers)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from chat.models import Conversation
from chat.serializers import conversation_json


def user_group(user_id: int) -> str:
    return f"chat.user.{user_id}"


async def announce(user_id: int, conversation_id: int, message_id: int, *, active: bool) -> None:
    """Tell every open tab of the user that a generation started or ended."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(user_group(user_id), {
            "type": "chat.generating", "conversation_id": conversation_id, "message_id": message_id, "active": active,
        })


def announce_conversation(conversation: Conversation) -> None:
    """Tell every open tab of the owner that a conversation changed (title, pin, archive); from
    synchronous code (a view, a Celery task)."""
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(user_group(conversation.owner_id), {
            "type": "chat.conversation", "conversation": conversation_json(conversation),
        })
