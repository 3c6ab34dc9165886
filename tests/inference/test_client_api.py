"""The rest of the client's surface against the simulated worker: refusals, API keys, load, info, health."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from harness.engines import start_simulator
from inference.client import GenerationRequest, SGLangClient
from inference.errors import EngineAuthError, EngineBadRequest, parse_retry_after
from inference.loads import from_get_load, from_metrics, from_v1_loads
from tests.inference.helpers import LONG_ANSWER_ARGS, chat, collect, until

LONG_QUESTION = chat("Tell me everything about the harbor, the tides, the pilots and the berths. " * 8)


@pytest.fixture(scope="module")
def small_context():
    with start_simulator("--context-length", "64") as w:
        yield w


async def test_an_over_long_prompt_is_a_bad_request_streamed_or_not(small_context):
    """Streamed, SGLang reports it as an error event after a 200; not streamed, as a 400."""
    async with SGLangClient(small_context.url) as client:
        with pytest.raises(EngineBadRequest) as streamed:
            await collect(client, GenerationRequest(messages=LONG_QUESTION, max_new_tokens=8))
        with pytest.raises(EngineBadRequest) as whole:
            await client.generate(GenerationRequest(messages=LONG_QUESTION, max_new_tokens=8))
    for refused in (streamed.value, whole.value):
        assert "context length" in refused.detail
        assert refused.status_code == 400
        assert "too long" in refused.user_message


async def test_prompt_plus_max_new_tokens_over_the_context_is_a_bad_request(small_context):
    async with SGLangClient(small_context.url) as client:
        with pytest.raises(EngineBadRequest, match="exceeds the model's maximum context length"):
            await collect(client, GenerationRequest(prompt="Hello there", max_new_tokens=500))


async def test_a_duplicate_request_id_is_refused(slow_worker):
    rid = "d" * 32
    async with SGLangClient(slow_worker.url) as first, SGLangClient(slow_worker.url) as second:
        events: list = []

        async def consume():
            async for event in first.generate_stream(
                GenerationRequest(messages=LONG_QUESTION, rid=rid, max_new_tokens=1000)
            ):
                events.append(event)

        task = asyncio.create_task(consume())
        await until(lambda: len(events) >= 2 or task.done(), what="the first stream to start")
        with pytest.raises(EngineBadRequest, match="Duplicate request ID"):
            await collect(second, GenerationRequest(prompt="Hi", rid=rid, max_new_tokens=2))
        await first.cancel(rid)
        await asyncio.wait_for(task, 10)
    assert events[-1].finish_reason == "abort"


async def test_api_key_is_sent_as_bearer_and_a_wrong_one_is_an_auth_error():
    key = "worker-secret"
    with start_simulator("--api-key", key) as guarded:
        async with SGLangClient(guarded.url, api_key=key) as client:
            out = await collect(client, GenerationRequest(prompt="Hello there", max_new_tokens=3))
            assert out.usage.completion_tokens == 3
            assert await client.models() == ["sim-small"]
        async with SGLangClient(guarded.url, api_key="wrong") as client:
            with pytest.raises(EngineAuthError) as refused:
                await collect(client, GenerationRequest(prompt="Hello there", max_new_tokens=3))
            assert refused.value.status_code == 401
            assert "operators" in refused.value.user_message or refused.value.user_message
            # Health stays open without a key (as SGLang: probes and scrapers carry none).
            assert await client.health() is True
        assert httpx.get(f"{guarded.url}/v1/models").json() == {"error": "Unauthorized"}


async def test_load_counts_running_and_waiting_requests_from_every_endpoint():
    with start_simulator(
        "--enable-metrics",
        "--max-running-requests",
        "1",
        *LONG_ANSWER_ARGS,
    ) as busy:
        async with SGLangClient(busy.url) as client:
            idle = await client.load()
            assert (idle.running_requests, idle.waiting_requests, idle.source) == (0, 0, "v1/loads")
            requests = [GenerationRequest(messages=LONG_QUESTION, max_new_tokens=1000) for _ in range(2)]
            tasks = [asyncio.create_task(collect(client, r)) for r in requests]

            async def loaded() -> bool:
                load = await client.load()
                return (load.running_requests, load.waiting_requests) == (1, 1)

            deadline = asyncio.get_running_loop().time() + 15
            while not await loaded():
                assert asyncio.get_running_loop().time() < deadline, "never one running and one waiting"
                await asyncio.sleep(0.02)
            # The three endpoints SGLang versions offer agree (read back to back while nothing changes state).
            async with httpx.AsyncClient(base_url=busy.url) as http:
                v1 = from_v1_loads((await http.get("/v1/loads")).json())
                legacy = from_get_load((await http.get("/get_load")).json())
                scraped = from_metrics((await http.get("/metrics")).text)
            for load in (v1, legacy, scraped):
                assert (load.running_requests, load.waiting_requests) == (1, 1), load
            assert v1.total_tokens == scraped.total_tokens
            assert v1.used_tokens > 0
            for r in requests:
                await client.cancel(r.rid)
            await asyncio.wait_for(asyncio.gather(*tasks), 15)
            # A running request leaves after one more forward step; a queued one at once.
            deadline = asyncio.get_running_loop().time() + 15
            while (await client.load()).total_requests:
                assert asyncio.get_running_loop().time() < deadline, "the aborted requests never left"
                await asyncio.sleep(0.02)


async def test_server_info_and_models_describe_the_worker():
    with start_simulator("--served-model-name", "sim-large", "--max-running-requests", "7") as w:
        async with SGLangClient(w.url) as client:
            info = await client.server_info()
            models = await client.models()
    assert models == ["sim-large"]
    assert info["served_model_name"] == "sim-large"
    assert info["max_running_requests"] == 7
    assert isinstance(info["tp_size"], int) and isinstance(info["max_total_num_tokens"], int)


async def test_any_model_name_is_served_as_sglang_does(worker):
    """SGLang serves one model and does not check the name a request gives (sim-small and sim-large
    can both be offered by one worker)."""
    async with SGLangClient(worker.url, mode="openai") as client:
        for name in ("sim-small", "sim-large", "anything"):
            out = await collect(client, GenerationRequest(messages=chat("Hi"), model=name, max_new_tokens=2))
            assert out.usage.completion_tokens == 2


async def test_health_is_false_while_the_worker_is_loading_and_true_once_ready():
    loading = start_simulator("--startup-delay", "60", wait_healthy=False)
    try:
        async with SGLangClient(loading.url) as client:
            assert await client.health() is False
    finally:
        loading.stop()
    with start_simulator() as ready:
        async with SGLangClient(ready.url) as client:
            assert await client.health() is True


def test_retry_after_is_read_as_seconds_or_an_http_date():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: retry now
