"""Token streams: every reader sees every frame exactly once, from any resume point, on both stores."""

import asyncio

import pytest
from django.conf import settings

from chat.generation.streams import (
    DELTA,
    DONE,
    KEEPALIVE,
    STOP_CHANNEL,
    AccountStop,
    LocalStreams,
    RedisStreams,
    hub_connection_name,
    is_frame_id,
)


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
    waiting_live = asyncio.Event()
    replayed_before_waiting = []

    async def reader():
        frames = []
        async for f in streams.follow(1, keepalive_ms=200):
            if f.kind != KEEPALIVE:
                frames.append(f)
            elif not waiting_live.is_set():
                # A keepalive is made only while the reader waits for frames not yet written: it is live.
                replayed_before_waiting.extend(frames)
                waiting_live.set()
        return frames

    task = asyncio.create_task(reader())
    await asyncio.wait_for(waiting_live.wait(), 10)
    assert [f.data["text"] for f in replayed_before_waiting] == ["Hel", "lo"]
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
    follower = streams.follow(3, keepalive_ms=50)
    first = await anext(follower)
    second = await asyncio.wait_for(anext(follower), 5)
    assert first.kind == DELTA and second.kind == KEEPALIVE
    await follower.aclose()


async def test_stop_requests_are_flagged_and_broadcast(streams):
    received = []
    listening = asyncio.Event()

    async def heard_from_now_on():
        listening.set()

    async def listen():
        async for message_id in streams.stop_commands(on_listening=heard_from_now_on):
            received.append(message_id)
            return

    listener = asyncio.create_task(listen())
    # A stop is broadcast only to listeners already listening: one requested before this reaches no one.
    await asyncio.wait_for(listening.wait(), 5)
    await streams.request_stop(42)
    await asyncio.wait_for(listener, 5)

    assert received == [42]
    assert await streams.stop_requested(42)
    assert not await streams.stop_requested(43)


async def test_a_suspension_is_broadcast_with_the_stops_and_garbage_on_the_channel_is_ignored(streams):
    received = []
    listening = asyncio.Event()

    async def heard_from_now_on():
        listening.set()

    async def listen():
        async for command in streams.stop_commands(on_listening=heard_from_now_on):
            received.append(command)
            if len(received) == 2:
                return

    listener = asyncio.create_task(listen())
    await asyncio.wait_for(listening.wait(), 5)
    if isinstance(streams, RedisStreams):  # another program on the channel: ignored, not fatal
        await streams.redis.publish(STOP_CHANNEL, '{"account": "x"}')
        await streams.redis.publish(STOP_CHANNEL, "not a stop")
    stop = AccountStop(user_id=7, refusal={"code": "account_suspended", "message": "Suspended: spam."})
    await streams.stop_account(stop)
    await streams.request_stop(42)
    await asyncio.wait_for(listener, 5)

    assert received == [stop, 42]
    assert not await streams.stop_requested(7)  # a suspension leaves no message's stop flag


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


@pytest.fixture
async def two_processes():
    """Two Redis stores, as two server processes have: a runner writes in one, readers follow in the other."""
    writer, reader = RedisStreams(settings.REDIS_URL), RedisStreams(settings.REDIS_URL)
    yield writer, reader
    await writer.redis.flushdb()


async def _until(condition, timeout: float = 10) -> None:
    """Wait for a condition of this process's own event loop (not a timing assumption)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def _hub_connections(streams: RedisStreams) -> int:
    return sum(1 for client in await streams.redis.client_list() if client.get("name") == hub_connection_name())


async def test_many_readers_of_streams_written_elsewhere_share_one_connection(two_processes):
    writer, reader = two_processes

    async def read_all(message_id):
        return [f async for f in reader.follow(message_id) if f.kind != KEEPALIVE]

    readers = [asyncio.create_task(read_all(100 + n % 5)) for n in range(50)]
    hub = reader._hub()
    # Every reader has replayed and is waiting live, and the reader loop has connected.
    await _until(lambda: sum(len(r) for r in hub.readers.values()) == 50 and len(hub.cursors) == 5)
    await _until(lambda: hub.loop_connection_id is not None)
    assert await _hub_connections(reader) == 1
    for message_id in range(100, 105):
        await writer.append(message_id, DELTA, {"text": f"answer {message_id}"})
        await writer.finish(message_id, [(DONE, {})])
    results = await asyncio.wait_for(asyncio.gather(*readers), 10)

    for n, frames in enumerate(results):
        assert [f.data.get("text") for f in frames] == [f"answer {100 + n % 5}", None]


async def test_a_reader_of_a_new_stream_wakes_the_blocked_reader_loop(two_processes, monkeypatch):
    writer, reader = two_processes
    # Long enough that a reader relying on the loop's own timeout would wait past this test's deadline.
    monkeypatch.setattr(type(reader._hub()), "BLOCK_MS", 120_000)

    async def read_all(message_id):
        return [f async for f in reader.follow(message_id) if f.kind != KEEPALIVE]

    first = asyncio.create_task(read_all(200))
    hub = reader._hub()
    # The loop is blocked (or about to block) in an XREAD naming stream 200 only.
    await _until(lambda: 200 in hub.cursors and hub.loop_connection_id is not None and hub.loop_version == hub.version)
    second = asyncio.create_task(read_all(201))
    await _until(lambda: 201 in hub.cursors)  # the newcomer follows live
    await writer.append(201, DELTA, {"text": "to the newcomer"})
    await writer.finish(201, [(DONE, {})])
    frames = await asyncio.wait_for(second, 10)
    assert [f.data.get("text") for f in frames] == ["to the newcomer", None]

    await writer.finish(200, [(DONE, {})])
    assert [f.kind for f in await asyncio.wait_for(first, 10)] == [DONE]


async def test_frames_written_while_a_reader_replays_are_seen_once(two_processes):
    writer, reader = two_processes
    ids = [await writer.append(300, DELTA, {"text": str(n)}) for n in range(20)]

    async def read_all():
        return [f async for f in reader.follow(300, after=ids[4]) if f.kind != KEEPALIVE]

    task = asyncio.create_task(read_all())
    for n in range(20, 40):
        await writer.append(300, DELTA, {"text": str(n)})
    await writer.finish(300, [(DONE, {})])
    frames = await asyncio.wait_for(task, 10)

    assert [f.data.get("text") for f in frames[:-1]] == [str(n) for n in range(5, 40)]
    assert frames[-1].kind == DONE


async def test_a_stream_redis_lost_is_never_continued_half_and_is_restored_with_its_own_ids():
    """Redis came back without its data: a continuing frame must not start a stream that lacks the
    answer's beginning; the runner restores what it sent (same ids), and every reader sees it whole."""
    from chat.generation.streams import StreamLost
    from chat.generation.streams.redis import _stream_key

    store = RedisStreams(settings.REDIS_URL)
    try:
        sent = [(await store.append(7, DELTA, {"text": t}), t) for t in ("Once ", "upon ")]
        await store.redis.delete(_stream_key(7))  # what a restart without persistence does

        with pytest.raises(StreamLost):
            await store.append(7, DELTA, {"text": "a time"}, continuing=True)
        with pytest.raises(StreamLost):
            await store.finish(7, [(DELTA, {"text": "a time"})], continuing=True)
        assert not await store.exists(7)  # nothing half was written

        await store.restore(7, sent)
        await store.append(7, DELTA, {"text": "a time"}, continuing=True)
        await store.finish(7, [(DONE, {"message": {}})], continuing=True)
        frames = await store.read(7)
        assert [f.id for f in frames[:2]] == [frame_id for frame_id, _ in sent]
        assert "".join(f.data.get("text", "") for f in frames) == "Once upon a time"
        resumed = await store.read(7, after=sent[0][0])  # a reader who had seen the first frame
        assert "".join(f.data.get("text", "") for f in resumed) == "upon a time"
    finally:
        await store.redis.flushdb()
        await store.redis.aclose()
