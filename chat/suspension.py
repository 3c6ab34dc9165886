"""A suspension reaches what the user has running, at once: the answers being written for them stop
(saved as `stopped`, billed for what was produced), every open chat WebSocket of theirs is told why
and closed (4403), and their running API completions end with the refusal (AccountWatch). Requests
after this are refused by accounts.standing, whatever the transport.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.dispatch import receiver
from redis.exceptions import RedisError

from accounts.models import User
from accounts.signals import account_suspended
from accounts.standing import AccountSuspended, account_refusal
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


def run_to_end(coroutine_function, *args) -> None:
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
    running = list(
        Message.objects.filter(conversation__owner=user, status__in=Message.ACTIVE_STATUSES).values_list(
            "pk", flat=True
        )
    )
    try:
        run_to_end(_stop_and_tell, user.pk, running, refusal.as_dict())
    except RedisError:
        # Their requests are refused anyway; the answers end by themselves, as the reaper ends any.
        log.warning("could not reach the live answers and sockets of suspended user %s", user.pk, exc_info=True)


class AccountWatch:
    """Lets a running API completion learn that its account was suspended meanwhile.

    It listens, on a channel of its own, to the user's channel-layer group, where `end_live_use` sends
    the refusal (the chat's WebSockets hear it there too), and then calls `on_refused` (which stops the
    completion); the response ends with `refusal`. Costs the request a group add and discard; nothing when there is no
    channel layer."""

    def __init__(self, user_id: int, *, on_refused: Callable[[], object] | None = None):
        self.group = user_group(user_id)
        self.refusal: AccountSuspended | None = None
        #: Called when the refusal arrives (the completion's stop: the driver then ends it).
        self.on_refused = on_refused
        self._layer = get_channel_layer()
        self._channel = ""
        self._task: asyncio.Task | None = None

    async def start(self) -> AccountWatch:
        if self._layer is not None:
            self._channel = await self._layer.new_channel()
            await self._layer.group_add(self.group, self._channel)
            self._task = asyncio.create_task(self._listen())
        return self

    async def _listen(self) -> None:
        try:
            while True:
                event = await self._layer.receive(self._channel)
                if event.get("type") == ACCOUNT_REFUSED:  # the group also carries the chat tabs' news
                    self.refusal = AccountSuspended(event["refusal"]["message"])
                    if self.on_refused is not None:
                        self.on_refused()
                    return
        except (RedisError, OSError):
            log.warning("stopped watching %s for a suspension", self.group, exc_info=True)

    def stop(self) -> None:
        """Stop listening. Never awaits: it runs in the `finally` of a response being cancelled (the
        client left), where an await would be cancelled too and skip the billing after it. Leaving
        the group happens in the background."""
        if self._task is None:
            return
        self._task.cancel()
        leaving = asyncio.get_running_loop().create_task(self._leave())
        _leaving.add(leaving)
        leaving.add_done_callback(_leaving.discard)

    async def _leave(self) -> None:
        try:
            await self._layer.group_discard(self.group, self._channel)
        except (RedisError, OSError):
            log.warning("could not leave %s", self.group, exc_info=True)


#: Background group discards still running (a reference keeps each task alive until it ends).
_leaving: set[asyncio.Task] = set()
