"""The embedded default runs Celery beat's schedule inside its one Daphne process (EMBEDDED_BEAT).

Without Redis, heartbeats, token streams and quota counters live in that process's memory, so the
periodic jobs must run there: stalled answers are reaped and billing periods roll over while
`make run` serves, and a live answer (whose heartbeat only that process can see) is left alone.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from datetime import timedelta

import pytest
from celery.schedules import crontab
from django.utils import timezone

from billing.models import Subscription
from billing.services import reserve_quota
from chat.generation.reap import INTERRUPTED_ERROR
from chat.models import Message
from config.celery import app
from config.embedded_beat import run_schedule
from harness.engines import start_simulator
from inference.models import InferenceNode
from tests.chat.factories import conversation_for, stalled_answer
from tests.chat.live import ChatClient
from tests.chat.test_live_streaming import LONG
from tests.conftest import make_user
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne
from tests.support.waiting import wait_until

RUNS: Counter = Counter()
RUNNING = {"now": 0, "most": 0}
LOCK = threading.Lock()
RELEASE_SLOW_JOB = threading.Event()


@app.task(name="tests.embedded_beat.tick")
def tick(label: str) -> None:
    RUNS[label] += 1


@app.task(name="tests.embedded_beat.broken")
def broken() -> None:
    RUNS["broken"] += 1
    raise RuntimeError("this job always breaks")


@app.task(name="tests.embedded_beat.slow")
def slow() -> None:
    with LOCK:
        RUNNING["now"] += 1
        RUNNING["most"] = max(RUNNING["most"], RUNNING["now"])
    RELEASE_SLOW_JOB.wait(30)
    with LOCK:
        RUNNING["now"] -= 1
    RUNS["slow"] += 1


@pytest.fixture(autouse=True)
def _reset():
    RUNS.clear()
    RUNNING.update(now=0, most=0)
    RELEASE_SLOW_JOB.clear()
    yield
    RELEASE_SLOW_JOB.set()


async def eventually(predicate, what: str) -> None:
    await asyncio.to_thread(wait_until, predicate, timeout=30, interval=0.05, what=what)


async def test_each_job_keeps_its_own_schedule_and_a_failing_one_is_logged_and_stops_nothing(caplog):
    an_hour_that_is_not_now = crontab(minute=(timezone.now().minute + 30) % 60)
    schedule = {
        "often": {"task": "tests.embedded_beat.tick", "schedule": 0.1, "kwargs": {"label": "often"}},
        "broken": {"task": "tests.embedded_beat.broken", "schedule": 0.1},
        "hourly": {"task": "tests.embedded_beat.tick", "schedule": an_hour_that_is_not_now, "args": ["hourly"]},
    }
    beat = asyncio.create_task(run_schedule(schedule))
    try:
        with caplog.at_level(logging.ERROR, logger="config.embedded_beat"):
            await eventually(lambda: RUNS["often"] >= 3 and RUNS["broken"] >= 3, "the jobs to take several turns")
    finally:
        beat.cancel()

    assert not beat.done() or beat.cancelled()  # the failures did not end the schedule
    assert RUNS["hourly"] == 0
    failures = [r for r in caplog.records if "broken" in r.getMessage()]
    assert failures and failures[0].exc_info[0] is RuntimeError


async def test_a_job_still_running_at_its_next_turn_is_not_started_twice(caplog):
    beat = asyncio.create_task(
        run_schedule(
            {
                "slow": {"task": "tests.embedded_beat.slow", "schedule": 0.05},
                "often": {"task": "tests.embedded_beat.tick", "schedule": 0.05, "args": ["often"]},
            }
        )
    )
    try:
        with caplog.at_level(logging.WARNING, logger="config.embedded_beat"):
            await eventually(lambda: RUNNING["now"] == 1, "the slow job to start")
            # Other jobs keep their turns while it runs, and its own turns are skipped, not piled up.
            await eventually(lambda: RUNS["often"] >= 5, "the other job to take turns meanwhile")
            assert RUNNING["most"] == 1
            RELEASE_SLOW_JOB.set()
            await eventually(lambda: RUNS["slow"] >= 2, "the slow job to take its next turn")
    finally:
        beat.cancel()
    assert RUNNING["most"] == 1
    assert any("still running" in r.getMessage() for r in caplog.records)


# -- live: the product's own schedule in a Daphne on the embedded default -------------------------------


def stalled_a_minute_ago(user) -> Message:
    """An answer left `streaming` by a process that died a minute ago (no heartbeat anywhere)."""
    return stalled_answer(
        conversation_for(user),
        "Half an ans",
        question="Are you still there?",
        reservation=reserve_quota(user, 200, model="sim-small").as_dict(),
        ago=timedelta(minutes=1),
    )


@pytest.fixture
def embedded_stack(transactional_db):
    """A simulated worker writing long answers, and Daphne as `make run` configures it, minus `make run`'s
    one-off reap at start-up: development profile, no Redis; only the schedule is shortened to 1 s."""
    engine = start_simulator(
        "--speed", "slow", "--min-answer-tokens", "900", "--max-answer-tokens", "1000", "--accept-any-model"
    )
    server = start_daphne(
        engine_url=engine.url,
        extra_env={
            "DJANGO_PROFILE": "development",
            "REDIS_URL": "",
            "CHAT_HEARTBEAT_TTL_SECONDS": "2",
            "DJANGO_SETTINGS_MODULE": "tests.support.short_beat_settings",
            "INFERENCE_NODES": f"sim={engine.url}",
        },
    )
    yield engine, server
    server.stop()
    engine.stop()


def test_the_embedded_default_reaps_stalled_answers_polls_the_nodes_and_rolls_billing_periods_over_by_itself(
    embedded_stack,
):
    _engine, server = embedded_stack
    user = make_user()
    first_stalled = stalled_a_minute_ago(user)
    subscriber = make_user("grace@example.com")
    put_on_plan(subscriber, "plus")
    now = timezone.now()
    Subscription.objects.filter(user=subscriber).update(
        current_period_start=now - timedelta(days=40), current_period_end=now - timedelta(days=10)
    )
    chat = ChatClient(server, user)

    # A stalled answer is found and ended, with its text kept and its tokens billed.
    wait_until(
        lambda: Message.objects.get(pk=first_stalled.pk).status == Message.Status.INTERRUPTED,
        what="the in-process reaper to end the stalled answer",
    )
    saved = Message.objects.get(pk=first_stalled.pk)
    assert (saved.content, saved.error) == ("Half an ans", INTERRUPTED_ERROR)

    # The nodes' poller runs too: the node named in INFERENCE_NODES is checked and found up (its load
    # sample stays in that process's memory, with no Redis).
    wait_until(
        lambda: InferenceNode.objects.filter(name="sim", health="up", last_checked__isnull=False).exists(),
        what="the in-process poller to find the node up",
    )

    # Billing upkeep runs too: the subscription whose month ended is moved into its current period.
    wait_until(
        lambda: Subscription.objects.get(user=subscriber).current_period_end > timezone.now(),
        what="the in-process rollover of the ended billing period",
    )

    # A live answer, older than the heartbeat's lifetime while a reaper turn runs, is left alone: the
    # jobs see the heartbeats of this process (a beat in another process would see none).
    live = chat.send_ok(LONG)["assistant_message"]
    list(chat.events(live["id"], limit=2))
    wait_until(
        lambda: timezone.now() - Message.objects.get(pk=live["id"]).created > timedelta(seconds=3),
        what="the live answer to outlive its heartbeat's lifetime",
    )
    second_stalled = stalled_a_minute_ago(user)
    wait_until(
        lambda: Message.objects.get(pk=second_stalled.pk).status == Message.Status.INTERRUPTED,
        what="a reaper turn that also saw the live answer",
    )
    assert Message.objects.get(pk=live["id"]).status == Message.Status.STREAMING
    _text, final, _events = chat.answer(live["id"])
    assert final["status"] == "completed"
    chat.close()

    log = server.log()
    assert log.count("EMBEDDED_BEAT: running Celery beat's schedule in this process") == 1
    assert "failed; it runs again" not in log, log
