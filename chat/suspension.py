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
from django.conf import settings
from django.dispatch import receiver
from django.utils import translation
from redis.exceptions import RedisError

from accounts.models import User
from accounts.signals import account_suspended
from accounts.standing import AccountSuspended, account_refusal
from chat.generation.notify import user_group
from chat.generation.run import watch_account
from chat.generation.streams import AccountStop, get_streams
from chat.models import Message

log = logging.getLogger(__name__)

#: The channel-layer event a suspended user's WebSocket consumers handle (ChatConsumer.chat_account_refused).
ACCOUNT_REFUSED = "chat.account_refused"


async def _stop_and_tell(user_id: int, message_ids: list[int], refusal: dict) -> None:
    streams = get_streams()
    # The running API completions, wherever they run (AccountWatch). Sent first: a runner stopped below
    # reads it to say its answer was stopped by the suspension (chat.generation.run).
    await streams.stop_account(AccountStop(user_id=user_id, refusal=refusal))
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
    # Said in the product's own language, not the staff member's: the API's completions end with it (the
    # API speaks English), and each chat socket says it again in its own person's (ChatConsumer).
    with translation.override(settings.LANGUAGE_CODE):
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

    `end_live_use` broadcasts the suspension with the stop commands, which this process's one stop
    listener hears (chat.generation.run.watch_account); the watch then keeps the refusal and calls
    `on_refused` (which stops the completion), and the response ends with the refusal. Starting and
    stopping a watch touch nothing outside the process."""

    def __init__(self, user_id: int, *, on_refused: Callable[[], object] | None = None):
        self.user_id = user_id
        self.refusal: AccountSuspended | None = None
        #: Called when the refusal arrives (the completion's stop: the driver then ends it).
        self.on_refused = on_refused
        self._unwatch: Callable[[], None] | None = None

    def start(self) -> AccountWatch:
        self._unwatch = watch_account(self.user_id, self._suspended)
        return self

    def _suspended(self, refusal: dict) -> None:
        if self.refusal is None:
            self.refusal = AccountSuspended(refusal.get("message") or "This account is suspended.")
            if self.on_refused is not None:
                self.on_refused()

    def stop(self) -> None:
        """Stop listening (never awaits: it runs in the `finally` of a response being cancelled)."""
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
