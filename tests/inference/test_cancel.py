"""Stopping a generation: every way the client can stop one also frees the engine's slot.

The slow worker writes 1000-token answers 10 ms apart, so a stream is still running when the test
acts; what is asserted is the order of events and the engine's own count (/get_load), not speed.
"""

from __future__ import annotations

import asyncio
import contextlib

from harness.engines import get_load
from inference.client import GenerationRequest, SGLangClient
from tests.inference.helpers import chat, collect, until

LONG = chat("Write a long story about the harbor.")


def busy(url: str) -> int:
    return get_load(url)["num_reqs"]


async def start_streaming(client: SGLangClient, request: GenerationRequest, min_deltas: int = 3):
    """Consume the stream in a task; return (task, events) once a few deltas arrived."""
    events: list = []

    async def consume():
        async for event in client.generate_stream(request):
            events.append(event)

    task = asyncio.create_task(consume())
    await until(lambda: len(events) >= min_deltas or task.done(), what="the first deltas")
    assert not task.done(), "the stream ended before the test could act on it"
    return task, events


async def test_cancel_ends_the_stream_with_abort_and_frees_the_slot(slow_worker):
    request = GenerationRequest(messages=LONG, max_new_tokens=1000)
    async with SGLangClient(slow_worker.url) as client:
        task, events = await start_streaming(client, request)
        assert busy(slow_worker.url) == 1
        await client.cancel(request.rid)
        await asyncio.wait_for(task, 10)
    assert events[-1].finish_reason == "abort" and events[-1].finish.reason == "abort"
    # Either the client cut the stream (the last chunk's counts, marked partial) or the engine's own
    # abort chunk arrived first (its final counts): both report what was produced, and no more.
    assert 3 <= events[-1].usage.completion_tokens < 1000
    await until(lambda: busy(slow_worker.url) == 0, what="the engine to free the slot")


async def test_cancelling_the_consuming_task_aborts_on_the_engine(slow_worker):
    async with SGLangClient(slow_worker.url) as client:
        task, _ = await start_streaming(client, GenerationRequest(messages=LONG, max_new_tokens=1000))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await until(lambda: busy(slow_worker.url) == 0, what="the engine to free the slot")


async def test_breaking_out_of_the_stream_aborts_on_the_engine(slow_worker):
    async with SGLangClient(slow_worker.url) as client:
        stream = client.generate_stream(GenerationRequest(messages=LONG, max_new_tokens=1000))
        async for event in stream:
            if event.text:
                break
        await stream.aclose()
        await until(lambda: busy(slow_worker.url) == 0, what="the engine to free the slot")


async def test_closing_the_client_mid_stream_aborts_on_the_engine(slow_worker):
    client = SGLangClient(slow_worker.url)
    task, events = await start_streaming(client, GenerationRequest(messages=LONG, max_new_tokens=1000))
    await client.aclose()
    await asyncio.wait_for(task, 10)
    assert events[-1].finish_reason == "abort" or events[-2].finish_reason == "abort"
    await until(lambda: busy(slow_worker.url) == 0, what="the engine to free the slot")


async def test_cancelling_a_queued_request_removes_it_from_the_queue(slow_worker):
    """max_running_requests is 2 on the slow worker: the third request waits, and its abort frees it."""
    async with SGLangClient(slow_worker.url) as client:
        running = [
            await start_streaming(client, GenerationRequest(messages=LONG, max_new_tokens=1000)) for _ in range(2)
        ]
        queued = GenerationRequest(messages=LONG, max_new_tokens=1000)
        waiting = asyncio.create_task(collect(client, queued))
        await until(lambda: get_load(slow_worker.url)["num_waiting_reqs"] == 1, what="the third request to queue")
        await client.cancel(queued.rid)
        result = await asyncio.wait_for(waiting, 10)
        assert result.text == "" and result.finish_reason == "abort"
        assert get_load(slow_worker.url)["num_waiting_reqs"] == 0
        for task, _ in running:
            task.cancel()
        await asyncio.gather(*(task for task, _ in running), return_exceptions=True)
        await until(lambda: busy(slow_worker.url) == 0, what="the engine to free every slot")


async def test_the_engine_ends_an_aborted_stream_itself_with_an_abort_finish(slow_worker):
    """Straight to SGLang: /abort_request makes the engine send the final chunk with finish_reason abort."""
    import httpx

    rid = "raw-abort-0001"
    body = {"text": "Tell a story.", "stream": True, "rid": rid, "sampling_params": {"max_new_tokens": 1000}}
    async with (
        httpx.AsyncClient(base_url=slow_worker.url, timeout=10) as http,
        http.stream("POST", "/generate", json=body) as response,
    ):
        lines = response.aiter_lines()
        first = await anext(lines)
        assert first.startswith("data: {")
        aborted = await http.post("/abort_request", json={"rid": rid})
        assert aborted.status_code == 200 and aborted.content == b""
        rest = [line async for line in lines if line]
    assert rest[-1] == "data: [DONE]"
    assert '"finish_reason":{"type":"abort","message":"Aborted"' in rest[-2]
    await until(lambda: busy(slow_worker.url) == 0, what="the engine to free the slot")
