"""What an answer holds (its admission place and its quota reservation) comes back once, when its end
is written, in one Redis round trip (issue 23, item 3)."""

from __future__ import annotations

import pytest
import redis.asyncio.client
from channels.db import database_sync_to_async

from billing import services as billing
from billing.models import UsageRecord
from billing.quota_store import RedisQuotaStore, get_store
from billing.selectors import current_period
from chat.generation import admission, run, settle
from chat.generation import answer as saved_answer
from chat.generation.start import start_turn
from chat.models import Conversation, Message
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db(transaction=True)


def _turn(user, content: str):
    """A turn in a conversation that has its title: no title is asked for after the answer (another
    generation, with a place of its own)."""
    chat = Conversation.objects.create(owner=user, title="Holds", model="sim-small")
    return start_turn(user, content=content, conversation_id=chat.pk)


@pytest.fixture
def counts_stay_fresh(monkeypatch):
    # The count the last admission saw stays usable for the whole test, however slow the machine.
    monkeypatch.setattr(admission._LastCount, "FRESH_SECONDS", 600.0)


async def test_an_answer_gives_its_place_back_once(engine, user, settings, counts_stay_fresh, store_kind):
    """Two answers in flight, one ends: this process counts one in flight, not none (the place was
    given back twice: by the final write and by the driver, and the early refusal's count drifted);
    the quota counter holds the second answer's reservation and the first's settled tokens."""
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    first = await database_sync_to_async(_turn)(user, "Tell me about rivers.")
    second = await database_sync_to_async(_turn)(user, "And about lakes.")
    assert admission._last_count.fresh() == 2
    freed_before = admission._line.given_back

    await run.run(saved_answer.generation_for(first))

    answer = await database_sync_to_async(Message.objects.get)(pk=first.assistant_message.pk)
    assert answer.status == Message.Status.COMPLETED, answer.error
    assert admission._line.given_back == freed_before + 1
    assert admission._last_count.fresh() == 1
    assert await database_sync_to_async(admission.in_flight)() == 1
    period = await database_sync_to_async(current_period)(user)
    record = await database_sync_to_async(UsageRecord.objects.get)(generation_id=str(answer.pk))
    assert get_store().snapshot(user.pk, period.period.key) == (record.billable_tokens, second.reservation.amount)

    await run.run(saved_answer.generation_for(second))

    assert await database_sync_to_async(admission.in_flight)() == 0
    assert get_store().snapshot(user.pk, period.period.key)[1] == 0


async def test_the_quota_and_the_place_come_back_in_one_round_trip(engine, user, settings, monkeypatch):
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(_turn)(user, "Tell me about rivers.")
    pipelines = []
    real_execute = redis.asyncio.client.Pipeline.execute

    async def execute(pipe, *args, **kwargs):
        pipelines.append([command[0][0] for command in pipe.command_stack])
        return await real_execute(pipe, *args, **kwargs)

    def separately(*args, **kwargs):
        pytest.fail("the quota counter was settled in a round trip of its own")

    monkeypatch.setattr(redis.asyncio.client.Pipeline, "execute", execute)
    monkeypatch.setattr(RedisQuotaStore, "apply", separately)

    await run.run(saved_answer.generation_for(turn))

    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)
    assert answer.status == Message.Status.COMPLETED, answer.error
    assert ["EVAL", "ZREM"] in [sorted(commands) for commands in pipelines]
    record = await database_sync_to_async(UsageRecord.objects.get)(generation_id=str(answer.pk))
    period = await database_sync_to_async(current_period)(user)
    used, held = get_store().snapshot(user.pk, period.period.key)
    assert (used, held) == (record.billable_tokens, 0)
    assert await database_sync_to_async(admission.in_flight)() == 0


async def test_a_redis_failure_at_the_end_loses_neither_the_answer_nor_its_ledger_row(
    engine, user, settings, monkeypatch, caplog
):
    """The counters are a cache of the ledger: when Redis cannot take them back, the answer and its
    row are still written, the hold lapses at its expiry and the reconciliation mends the counter."""
    settings.SGLANG_URL = engine.url
    await database_sync_to_async(put_on_plan)(user, "pro")
    turn = await database_sync_to_async(_turn)(user, "Tell me about rivers.")
    real_execute = redis.asyncio.client.Pipeline.execute

    async def execute(pipe, *args, **kwargs):
        if any(command[0][0] == "ZREM" for command in pipe.command_stack):
            raise redis.exceptions.ConnectionError("No connection available.")
        return await real_execute(pipe, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.client.Pipeline, "execute", execute)

    await run.run(saved_answer.generation_for(turn))

    answer = await database_sync_to_async(Message.objects.get)(pk=turn.assistant_message.pk)
    assert answer.status == Message.Status.COMPLETED, answer.error
    assert await database_sync_to_async(UsageRecord.objects.filter(generation_id=str(answer.pk)).count)() == 1
    assert "not given back now" in caplog.text


async def test_a_bill_committed_after_the_holds_were_given_back_is_still_counted(user, store_kind):
    """The runner was cancelled while its final write went on in a worker thread: the driver gave the
    holds back without the bill's counter update, which the thread's commit adds afterwards. It is
    applied then, not left in a list nobody sends (the user would have had those tokens free)."""
    await database_sync_to_async(put_on_plan)(user, "pro")
    reservation = await database_sync_to_async(billing.reserve_quota)(user, 500, model="sim-small")
    period = await database_sync_to_async(current_period)(user)
    holds = settle.Holds(place="")
    await settle.give_back(holds)

    await database_sync_to_async(billing.release)(reservation, counters=holds.counters)

    assert get_store().snapshot(user.pk, period.period.key)[1] == 0
