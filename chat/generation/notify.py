"""Telling every open tab of a user what changed: a generation started or ended, a conversation
was renamed, pinned or titled. Sent on the channel layer to the user's group, which each of their
WebSocket connections joins (chat.consumers)."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from redis.exceptions import RedisError

from chat.models import Conversation
from chat.serializers import conversation_json

log = logging.getLogger(__name__)


def user_group(user_id: int) -> str:
    return f"chat.user.{user_id}"


async def announce(user_id: int, conversation_id: int, message_id: int, *, active: bool) -> None:
    """Tell every open tab of the user that a generation started or ended."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(
            user_group(user_id),
            {
                "type": "chat.generating",
                "conversation_id": conversation_id,
                "message_id": message_id,
                "active": active,
            },
        )


async def announce_quietly(user_id: int, conversation_id: int, message_id: int, *, active: bool) -> None:
    """`announce`, for a runner: a notice the channel layer cannot take now is logged, not raised (tabs
    catch up when they next load the sidebar; the answer itself must not fail for it)."""
    try:
        await announce(user_id, conversation_id, message_id, active=active)
    except (RedisError, ChannelFull):
        log.warning(
            "could not tell the tabs of user %s that message %s %s",
            user_id,
            message_id,
            "started" if active else "ended",
            exc_info=True,
        )


def announce_conversation(conversation: Conversation) -> None:
    """Tell every open tab of the owner that a conversation changed (title, pin, archive); from
    synchronous code (a view, a Celery task)."""
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(
            user_group(conversation.owner_id),
            {
                "type": "chat.conversation",
                "conversation": conversation_json(conversation),
            },
        )
