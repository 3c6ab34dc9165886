"""Engine work on worker threads gives its database connection back to the pool.

Routing a job reads the fleet from the database on a worker thread. A connection left open in that
thread stays checked out of the pool for as long as the thread lives (for ever, once the thread is
gone), and a pool of a few connections then refuses every request that needs one: under load this
showed as answers stalling for a minute and titles failing with "couldn't get a connection".
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import connection

from chat import titles
from chat.generation import engine as chat_engine
from chat.generation.turn import TITLE
from harness.engines import start_simulator
from inference.routing import NoNodeAvailable
from tests.support.plans import put_on_plan


def _checked_out() -> int:
    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


def _in_a_thread(work) -> None:
    """Run `work` the way a Celery task runs it: a thread of its own, with its own event loop."""
    errors: list[BaseException] = []

    def target():
        try:
            work()
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the work did not finish"
    assert not errors, errors


@pytest.fixture
def engine_url(settings):
    engine = start_simulator("--accept-any-model")
    settings.SGLANG_URL = engine.url
    yield engine.url
    engine.stop()


@pytest.mark.django_db(transaction=True)
def test_a_short_completion_gives_its_connections_back(engine_url, user):
    """A title, as the Celery task writes it: on a thread and event loop of its own."""
    put_on_plan(user, "pro")
    connection.close()  # this thread holds none either, so the pool's count is the others'
    before = _checked_out()
    for _ in range(3):
        _in_a_thread(lambda: titles.complete(user, "sim-small", "Name this conversation.", 8, purpose=TITLE))
    assert _checked_out() == before


@pytest.mark.django_db(transaction=True)
def test_routing_a_job_again_on_the_loop_gives_its_connection_back(engine_url):
    """The retry on another node (and the admission wait) routes from the running loop's threads."""
    connection.close()
    before = _checked_out()

    async def route_several():
        for _ in range(8):
            job = chat_engine.Job(model="sim-small", rid="", messages=[], max_tokens=8, prompt_estimate=0)
            try:
                await chat_engine.route_job_async(job)
            except NoNodeAvailable:
                pytest.fail("the simulated node should be routable")

    _in_a_thread(lambda: asyncio.run(route_several()))
    assert _checked_out() == before
