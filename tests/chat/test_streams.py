"""Token streams: every reader sees every frame exactly once, from any resume point, on both stores."""

import asyncio

import pytest
from django.conf import settings

from chat.streams import DELTA, DONE, KEEPALIVE, LocalStreams, RedisStreams, is_frame_id


@pytest.fixture(params=["redis", "local"])
async def streams(request):
    if request.param == "local":
        yield LocalStreams()
        return
    store = RedisStreams(settings.REDIS_URL)
    yield store
    await store.redis.flushdb()
    await store.redis.aclose()


async def test_a_late_reader_replays_then_follows_live(streams):
    await streams.append(1, DELTA, {"text": "Hel"})
    await streams.append(1, DELTA, {"text": "lo"})

    async def reader():
        return [f async for f in streams.follow(1, block_ms=200) if f.kind != KEEPALIVE]

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.05)
    await streams.append(1, DELTA, {"text": ", world"})
    await streams.append(1, DONE, {"message": {"status": "completed"}})
    frames = await asyncio.wait_for(task, 10)

    assert "".join(f.data["text"] for f in frames if f.kind == DELTA) == "Hello, world"
    assert frames[-1].kind == DONE
    assert len({f.id for f in frames}) == len(frames)


async def test_resuming_after_an_id_skips_exactly_what_was_seen(streams):
    ids = [await streams.append(7, DELTA, {"text": c}) for c in "abcde"]
    await streams.append(7, DONE, {})

    resumed = [f async for f in streams.follow(7, after=ids[2])]

    assert [f.data.get("text") for f in resumed] == ["d", "e", None]
    assert all(is_frame_id(f.id) for f in resumed)


async def test_a_reader_waiting_with_nothing_new_gets_keepalives(streams):
    await streams.append(3, DELTA, {"text": "x"})
    follower = streams.follow(3, block_ms=50)
    first = await anext(follower)
    second = await asyncio.wait_for(anext(follower), 5)
    assert first.kind == DELTA and second.kind == KEEPALIVE
    await follower.aclose()


async def test_stop_requests_are_flagged_and_broadcast(streams):
    received = []

    async def listen():
        async for message_id in streams.stop_commands():
            received.append(message_id)
            return

    listener = asyncio.create_task(listen())
    await asyncio.sleep(0.1)  # let the subscription start
    await streams.request_stop(42)
    await asyncio.wait_for(listener, 5)

    assert received == [42]
    assert await streams.stop_requested(42)
    assert not await streams.stop_requested(43)


async def test_heartbeats_expire_and_finishing_clears_them(streams):
    await streams.beat(5, ttl=30)
    await streams.beat(6, ttl=30)
    assert await streams.alive([5, 6, 7]) == {5, 6}
    await streams.finish(5)
    assert await streams.alive([5, 6]) == {6}


def test_frame_ids_from_clients_are_validated():
    assert is_frame_id("1732183200000-0")
    assert not is_frame_id("0-0; DROP")
    assert not is_frame_id("")
