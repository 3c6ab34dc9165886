"""A running API completion's suspension watch (chat.suspension.AccountWatch) hears the suspension through
this process's stop listener, and one watcher that fails does not end that listener for the others."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from chat.generation import run
from chat.generation.streams import STOP_CHANNEL, AccountStop, get_streams
from chat.suspension import AccountWatch

REFUSAL = {"code": "account_suspended", "message": "This account is suspended: spam."}


async def _listening() -> None:
    streams = get_streams()
    for _ in range(200):
        if (await streams.redis.pubsub_numsub(STOP_CHANNEL))[0][1] > 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the stop listener never subscribed")


@pytest.fixture
async def listener():
    yield
    if run._stop_listener is not None:
        run._stop_listener.cancel()
        run._stop_listener = None


async def test_a_watch_hears_the_suspension_and_a_failing_watcher_spares_the_listener(listener):
    def broken(refusal):
        raise RuntimeError("a watcher's own bug")

    stopped = asyncio.Event()
    unwatch_broken = run.watch_account(7, broken)
    watch = AccountWatch(7, on_refused=stopped.set).start()
    others = AccountWatch(8).start()
    await _listening()

    await get_streams().stop_account(AccountStop(user_id=7, refusal=REFUSAL))
    await asyncio.wait_for(stopped.wait(), 5)
    assert str(watch.refusal) == REFUSAL["message"] and others.refusal is None

    # The listener is still there: a later suspension reaches another watch.
    await get_streams().stop_account(AccountStop(user_id=8, refusal=REFUSAL))
    for _ in range(250):
        if others.refusal is not None:
            break
        await asyncio.sleep(0.02)
    assert others.refusal is not None
    for ended in (unwatch_broken, watch.stop, others.stop):
        ended()
    assert 7 not in run._account_watchers and 8 not in run._account_watchers


async def _listener_away() -> None:
    """The stop listener's connection is gone (as when Redis restarts or a proxy resets it): nothing
    published now reaches this process."""
    run._stop_listener.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run._stop_listener


async def test_a_suspension_broadcast_while_the_listener_was_away_reaches_the_watch_when_it_is_back(listener):
    stopped = asyncio.Event()
    watch = AccountWatch(7, on_refused=stopped.set).start()
    await _listening()
    await _listener_away()

    await get_streams().stop_account(AccountStop(user_id=7, refusal=REFUSAL))
    run._ensure_stop_listener()  # subscribed again, as the listener does by itself after a lost connection

    await asyncio.wait_for(stopped.wait(), 5)
    assert str(watch.refusal) == REFUSAL["message"]
    watch.stop()


async def test_a_watch_started_after_a_suspension_is_not_ended_by_it(listener):
    """An account suspended a minute ago, then reinstated: its new completion is not ended by the old
    suspension when the listener subscribes again (while the old one is still kept)."""
    await get_streams().stop_account(AccountStop(user_id=9, refusal=REFUSAL, at=time.time() - 60))
    watch = AccountWatch(9).start()
    await _listening()
    await _listener_away()
    run._ensure_stop_listener()
    await _listening()
    await run._stop_those_flagged()  # what the listener did on subscribing, done once more to be sure it ran
    assert watch.refusal is None
    watch.stop()
