"""429s and 503s are counted per minute for the staff dashboard, where every refusal leaves: the ASGI
gate in front of every HTTP response (its own 503s too) and the chat WebSocket's error frame."""

from __future__ import annotations

import asyncio
import time

import pytest

from config import refusal_counts
from config.overload import ConcurrencyGate
from config.per_minute import MinuteCounts, MinutePeaks, minute_of
from config.redis import sync_client
from config.refusal_counts import REFUSALS, count_refusal
from tests.test_overload import _call


def counted(since: int) -> dict[str, int]:
    """Refusals counted from minute `since` to the next (a test may cross a minute's end)."""
    return {status: sum(per_minute) for status, per_minute in refusal_counts.per_minute(since, 2).items()}


def _answering(status: int):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


@pytest.fixture(params=["redis", "in-process"])
def store(request, settings):
    """Both stores: Redis (every process adds to the same minutes) and the embedded default's memory."""
    if request.param == "in-process":
        settings.REDIS_URL = ""
        REFUSALS.clear_local()
        yield request.param
        REFUSALS.clear_local()
    else:
        yield request.param


async def test_the_gate_counts_each_429_and_503_it_sends_and_nothing_else(store, settings):
    settings.WEB_MAX_CONCURRENT_REQUESTS = 10
    since = minute_of(time.time())
    before = counted(since)
    for status in (200, 404, 429, 429, 503, 500, 403):
        assert (await _call(ConcurrencyGate(_answering(status)), "/chat/api/send"))[0] == status

    after = counted(since)
    assert after["429"] - before["429"] == 2
    assert after["503"] - before["503"] == 1


async def test_the_gates_own_503_is_counted(store, settings):
    settings.WEB_MAX_CONCURRENT_REQUESTS = 1
    gate = ConcurrencyGate(_answering(200))
    gate.active = 1  # another request is being admitted
    since = minute_of(time.time())
    before = counted(since)

    assert (await _call(gate, "/v1/chat/completions"))[0] == 503

    assert counted(since)["503"] - before["503"] == 1


async def test_a_count_that_cannot_be_written_is_dropped_not_the_refusal(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    settings.WEB_MAX_CONCURRENT_REQUESTS = 10

    await count_refusal(429)  # does not raise
    assert (await _call(ConcurrencyGate(_answering(429)), "/chat/api/send"))[0] == 429


@pytest.mark.parametrize("backend", ["redis", "in-process"])
def test_minutes_are_counted_apart_and_forgotten_after_two_hours(backend, settings):
    if backend == "in-process":
        settings.REDIS_URL = ""
    counts, peaks = MinuteCounts("test-counts"), MinutePeaks("test-peaks")
    start = minute_of(time.time()) * 60
    counts.add("429", now=start)
    counts.add("429", 2, now=start + 59)
    counts.add("503", now=start + 60)
    peaks.record({"a": 3, "b": 1}, now=start)
    peaks.record({"a": 2, "b": 4}, now=start + 30)
    peaks.record({"a": 1}, now=start + 60)

    assert counts.read(minute_of(start) - 1, 3) == [{}, {"429": 3}, {"503": 1}]
    assert peaks.read(minute_of(start), 2) == [{"a": 3, "b": 4}, {"a": 1}]
    if backend == "in-process":
        counts.add("429", now=start + 2 * 3600 + 60)  # two hours on: the first minutes are dropped
        assert counts.read(minute_of(start), 1) == [{}]
    else:
        ttl = sync_client().ttl(f"sglchat:per-minute:test-counts:{minute_of(start)}")
        assert 2 * 3600 - 5 <= ttl <= 2 * 3600


async def test_a_burst_of_refusals_is_written_in_one_round_trip_and_read_before_it_is(settings, monkeypatch):
    """At busy times refusals come by the hundred a second; a write each cost the process as much as the
    refusal (issue 23). They are written together, and this process reads its own before then."""
    writes: list[dict] = []
    write = REFUSALS.aadd_many

    async def recorded(counts):
        await write(counts)
        writes.append(dict(counts))

    monkeypatch.setattr(REFUSALS, "aadd_many", recorded)
    since = minute_of(time.time())
    stored_before = sum(row.get("503", 0) for row in REFUSALS.read(since, 2))
    before = counted(since)

    for _ in range(50):
        await count_refusal(503)
    await count_refusal(429)

    assert counted(since)["503"] - before["503"] == 50  # read at once, not yet written
    await wait_for(lambda: writes)
    assert len(writes) == 1 and sum(writes[0].values()) == 51
    assert sum(row.get("503", 0) for row in REFUSALS.read(since, 2)) - stored_before == 50
    assert counted(since)["503"] - before["503"] == 50  # and not counted twice once written


async def wait_for(predicate, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "the counts were never written"
        await asyncio.sleep(0.05)


async def test_a_probes_503_is_not_a_refusal(store, settings):
    """/readyz answers 503 to a load balancer while the database or Redis is away: nobody was refused."""
    settings.WEB_MAX_CONCURRENT_REQUESTS = 10
    since = minute_of(time.time())
    before = counted(since)
    for path in ("/readyz", "/healthz", "/metrics"):
        assert (await _call(ConcurrencyGate(_answering(503)), path))[0] == 503
    assert counted(since)["503"] == before["503"]
