"""A suspension reaches what the user has running, at once: the answers being written for them stop
(saved as `stopped`, billed for what was produced) and every open chat WebSocket of theirs is told
why and closed (4403). Requests after this are refused by accounts.standing, whatever the transport.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.dispatch import receiver
from redis.exceptions import RedisError

from accounts.models import User
from accounts.signals import account_suspended
from accounts.standing import account_refusal
from chat.generation.notify import user_group
from chat.generation.streams import get_streams
from chat.models import Message

log = logging.getLogger(__name__)

#: The channel-layer event a suspended user's WebSocket consumers handle (ChatConsumer.chat_account_refused).
ACCOUNT_REFUSED = "chat.account_refused"


async def _stop_and_tell(user_id: int, message_ids: list[int], refusal: dict) -> None:
    streams = get_streams()
    for message_id in message_ids:
        # Reaches the runner wherever it runs (the stop broadcast), which saves the answer as stopped.
        await streams.request_stop(message_id)
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(user_group(user_id), {"type": ACCOUNT_REFUSED, "refusal": refusal})


def _run_to_end(coroutine_function, *args) -> None:
    """Run it from synchronous code: a view's or a task's thread (asgiref takes it to the server's loop,
    where in-memory channel layers live), or, from a thread whose own loop is running (a script or test
    driver), on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async_to_sync(coroutine_function)(*args)
        return
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(async_to_sync(coroutine_function), *args).result()


@receiver(account_suspended, dispatch_uid="chat.suspension.end_live_use")
def end_live_use(sender, user: User, **kwargs) -> None:
    refusal = account_refusal(user)
    if refusal is None:  # reinstated before this ran
        return
    running = list(Message.objects.filter(conversation__owner=user, status__in=Message.ACTIVE_STATUSES)
                   .values_list("pk", flat=True))
    try:
        _run_to_end(_stop_and_tell, user.pk, running, refusal.as_dict())
    except RedisError:
        # Their requests are refused anyway; the answers end by themselves, as the reaper ends any.
        log.warning("could not reach the live answers and sockets of suspended user %s", user.pk, exc_info=True)
