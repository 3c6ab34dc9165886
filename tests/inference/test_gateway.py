"""Conformance with the real SGLang Model Gateway (``smg`` 0.3.2, the ``router`` extra).

Two simulated workers behind ``smg launch --policy cache_aware`` on loopback: the gateway must
register them as SGLang workers, and the client must stream ``/generate`` and
``/v1/chat/completions`` through it, and stop a generation by closing the connection (the gateway has
no ``/abort_request``), which must free the worker's slot. These tests fail, not skip, when ``smg`` is
missing: the gateway is part of what ``make test`` installs.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from harness.engines import get_load, http_get, start_gateway, start_simulator
from inference.client import GenerationRequest, SGLangClient
from inference.errors import EngineOverloaded
from tests.inference.helpers import LONG_ANSWER_ARGS, chat, collect, expected_cached, prompt_ids, until

# Long answers 10 ms apart, so a stream is still running when a test acts; short requests ask for few tokens.
WORKER_ARGS = ("--enable-metrics", "--enable-cache-report", *LONG_ANSWER_ARGS)
SHARED = (
    "You are the assistant of a harbor office. You answer questions about tides, berths, pilots and "
    "the weather, briefly and in plain words, and you say so when you do not know. "
) * 3


@pytest.fixture(scope="module")
def workers():
    with start_simulator(*WORKER_ARGS) as a, start_simulator(*WORKER_ARGS) as b:
        yield [a, b]


@pytest.fixture(scope="module")
def gateway(workers):
    with start_gateway([w.url for w in workers], policy="cache_aware") as g:
        yield g


def in_flight(workers) -> int:
    return sum(get_load(w.url)["num_reqs"] for w in workers)


def requests_served(url: str) -> int:
    """The worker's own count of finished requests (sglang:num_requests_total, both label sets)."""
    status, body = http_get(f"{url}/metrics")
    assert status == 200
    return int(sum(float(v) for v in re.findall(r"^sglang:num_requests_total\{[^}]*\} (\S+)$", body.decode(), re.M)))


def test_the_gateway_registers_both_simulated_workers_as_sglang(gateway, workers):
    status, body = http_get(f"{gateway.url}/workers")
    assert status == 200, body
    listed = httpx.Response(200, content=body).json()["workers"]
    assert sorted(w["url"] for w in listed) == sorted(w.url for w in workers)
    assert all(w["is_healthy"] and w["model_id"] == "sim-small" for w in listed)
    models = httpx.get(f"{gateway.url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["sim-small"]


async def test_generate_streams_through_the_gateway_as_it_does_straight(gateway, workers):
    request = GenerationRequest(messages=chat("What does the tide do tonight?"), max_new_tokens=24, temperature=0)
    async with SGLangClient(gateway.url, behind_gateway=True) as through, SGLangClient(workers[0].url) as straight:
        routed = await collect(through, request)
        direct = await straight.generate(GenerationRequest(messages=request.messages, max_new_tokens=24, temperature=0))
    assert routed.text and routed.text == direct.text
    assert routed.finish_reason == "length"
    assert routed.usage.prompt_tokens == direct.usage.prompt_tokens
    assert routed.usage.completion_tokens == 24


async def test_chat_completions_stream_through_the_gateway_with_usage(gateway):
    request = GenerationRequest(
        messages=chat("Which berth is free?"), model="sim-large", max_new_tokens=16, temperature=0
    )
    async with SGLangClient(gateway.url, mode="openai", behind_gateway=True) as client:
        out = await collect(client, request)
    assert out.text
    assert out.finish_reason == "length"
    assert out.usage.prompt_tokens == len(prompt_ids(request.messages))
    assert out.usage.completion_tokens == 16


async def test_cache_aware_routing_sends_a_shared_prefix_where_it_is_cached(gateway):
    """The gateway's tree matches the second prompt's text to the first one's worker, whose radix cache
    then reports the shared prefix as cached tokens."""
    first = chat("Is the north berth free at noon?", system=SHARED)
    second = chat("When does the pilot boat leave?", system=SHARED)
    async with SGLangClient(gateway.url, behind_gateway=True) as client:
        await collect(client, GenerationRequest(messages=first, max_new_tokens=4, temperature=0))
        again = await collect(client, GenerationRequest(messages=second, max_new_tokens=4, temperature=0))
    assert again.usage.cached_tokens == expected_cached(prompt_ids(first), prompt_ids(second))
    assert again.usage.cached_tokens > len(prompt_ids(second)) // 2


async def test_cancel_through_the_gateway_frees_the_worker_slot(gateway, workers):
    request = GenerationRequest(messages=chat("Tell me a long story about the harbor."), max_new_tokens=1000)
    events: list = []
    async with SGLangClient(gateway.url, behind_gateway=True) as client:

        async def consume():
            async for event in client.generate_stream(request):
                events.append(event)

        task = asyncio.create_task(consume())
        await until(lambda: len(events) >= 3 or task.done(), what="the first tokens through the gateway")
        assert not task.done()
        assert in_flight(workers) == 1
        await client.cancel(request.rid)  # behind the gateway: closes the connection
        await asyncio.wait_for(task, 15)
    assert events[-1].finish_reason == "abort"
    assert events[-1].usage.completion_tokens < 1000
    await until(lambda: in_flight(workers) == 0, timeout=30, what="the worker to abort the request and free its slot")


async def test_breaking_out_of_a_stream_through_the_gateway_frees_the_worker_slot(gateway, workers):
    request = GenerationRequest(messages=chat("Tell me another long story."), max_new_tokens=1000)
    async with SGLangClient(gateway.url, behind_gateway=True) as client:
        seen = 0
        async for _event in client.generate_stream(request):
            seen += 1
            if seen == 3:
                assert in_flight(workers) == 1
                break
        await until(lambda: in_flight(workers) == 0, timeout=30, what="the worker to free its slot")


async def test_manual_policy_keeps_a_routing_key_on_one_worker(workers):
    with start_gateway([w.url for w in workers], policy="manual") as sticky:
        before = [requests_served(w.url) for w in workers]
        async with SGLangClient(sticky.url, behind_gateway=True) as client:
            for i in range(6):
                await collect(
                    client,
                    GenerationRequest(
                        messages=chat(f"Question {i} about the tides."), max_new_tokens=2, routing_key="conversation-42"
                    ),
                )
        served = [requests_served(w.url) - b for w, b in zip(workers, before, strict=True)]
    assert sorted(served) == [0, 6]


def test_flush_cache_through_the_gateway_reaches_every_worker(gateway, workers):
    response = httpx.post(f"{gateway.url}/flush_cache", timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["workers_flushed"] == len(workers)


async def test_a_gateway_with_an_api_key_passes_it_to_workers_that_require_it():
    key = "gateway-and-worker-key"
    with (
        start_simulator("--api-key", key) as a,
        start_simulator("--api-key", key) as b,
        start_gateway([a.url, b.url], api_key=key) as g,
    ):
        async with SGLangClient(g.url, api_key=key, behind_gateway=True) as client:
            out = await collect(client, GenerationRequest(prompt="Hello there", max_new_tokens=3, temperature=0))
        assert out.usage.completion_tokens == 3
        refused = httpx.post(f"{g.url}/generate", json={"text": "hi"}, timeout=10)
        assert refused.status_code == 401


async def test_the_gateways_own_concurrency_limit_is_overload(workers):
    """smg's --max-concurrent-requests with no queue answers 429 (no Retry-After): EngineOverloaded."""
    with start_gateway(
        [workers[0].url], policy="round_robin", extra_args=["--max-concurrent-requests", "1", "--queue-size", "0"]
    ) as narrow:
        async with SGLangClient(narrow.url, behind_gateway=True) as client:
            events: list = []
            long = GenerationRequest(messages=chat("Tell me a long story about the pilots."), max_new_tokens=1000)

            async def consume():
                async for event in client.generate_stream(long):
                    events.append(event)

            task = asyncio.create_task(consume())
            await until(lambda: len(events) >= 2 or task.done(), what="the first stream through the gateway")
            with pytest.raises(EngineOverloaded) as refused:
                await collect(client, GenerationRequest(prompt="Hello", max_new_tokens=2))
            assert refused.value.status_code == 429
            assert refused.value.retry_after is None
            await client.cancel(long.rid)
            await asyncio.wait_for(task, 15)
    await until(lambda: in_flight(workers) == 0, timeout=30, what="the worker to free its slot")
