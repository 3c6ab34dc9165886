"""The simulated worker speaks SGLang's HTTP protocol (sglang-protocol.md §0-§4, §8), checked on the wire."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from harness.engines import get_load, start_simulator
from inference.client import GenerationRequest, SGLangClient
from inference.errors import EngineAuthError, EngineBadRequest
from simulator import tokenizer as tok
from tests.inference.conftest import API_KEY
from tests.inference.helpers import chat, collect, until


def sse_payloads(body: str) -> list:
    lines = [line for line in body.split("\n\n") if line]
    assert all(line.startswith("data: ") and "\n" not in line for line in lines), "one data line per event"
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines]


@pytest.fixture(scope="module")
def keyed():
    with start_simulator("--enable-metrics", api_key=API_KEY) as w:
        yield w


def test_api_key_is_required_except_for_health_ready_and_metrics(keyed):
    bearer = {"Authorization": f"Bearer {API_KEY}"}
    for path in ("/v1/models", "/get_load", "/server_info", "/flush_cache"):
        refused = httpx.get(f"{keyed.url}{path}")
        assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}, path
        assert httpx.get(f"{keyed.url}{path}", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{keyed.url}/v1/models", headers=bearer).status_code == 200
    for path in ("/health", "/health_generate", "/ready", "/metrics"):
        assert httpx.get(f"{keyed.url}{path}", timeout=10).status_code == 200, path
    assert httpx.options(f"{keyed.url}/generate").status_code != 401


async def test_the_client_sends_the_key_and_a_wrong_key_is_an_auth_error(keyed):
    async with SGLangClient(keyed.url, api_key=API_KEY) as good, SGLangClient(keyed.url, api_key="nope") as bad:
        assert (await collect(good, GenerationRequest(prompt="Hello", max_new_tokens=3))).finish_reason == "length"
        with pytest.raises(EngineAuthError):
            await collect(bad, GenerationRequest(prompt="Hello", max_new_tokens=3))


def test_admin_key_guards_admin_routes_only():
    with start_simulator("--api-key", "user-key", "--admin-api-key", "admin-key") as w:
        user, admin = {"Authorization": "Bearer user-key"}, {"Authorization": "Bearer admin-key"}
        assert httpx.post(f"{w.url}/abort_request", json={"rid": "x"}, headers=user).status_code == 401
        assert httpx.post(f"{w.url}/abort_request", json={"rid": "x"}, headers=admin).status_code == 200
        assert httpx.get(f"{w.url}/v1/models", headers=user).status_code == 200
        assert httpx.get(f"{w.url}/v1/models", headers=admin).status_code == 401


def test_native_stream_is_cumulative_with_meta_info_and_done(worker):
    body = {
        "text": "The quiet river",
        "stream": True,
        "rid": "proto-native-1",
        "sampling_params": {"max_new_tokens": 4, "temperature": 0},
    }
    response = httpx.post(f"{worker.url}/generate", json=body, timeout=10)
    assert response.headers["content-type"].startswith("text/event-stream")
    *chunks, done = sse_payloads(response.text)
    assert done == "[DONE]" and len(chunks) == 4
    for n, chunk in enumerate(chunks, start=1):
        meta = chunk["meta_info"]
        assert meta["id"] == "proto-native-1"
        assert len(chunk["output_ids"]) == meta["completion_tokens"] == n
        assert chunk["text"] == tok.decode(chunk["output_ids"])
        assert meta["prompt_tokens"] == len(tok.encode("The quiet river"))
        assert "cached_tokens" in meta
        assert (meta["finish_reason"] is None) == (n < 4)
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    assert "e2e_latency" in chunks[-1]["meta_info"] and "e2e_latency" not in chunks[0]["meta_info"]


def test_openai_chat_stream_order_role_deltas_finish_usage_done(worker):
    body = {
        "model": "anything",
        "messages": chat("Hi"),
        "max_tokens": 3,
        "stream": True,
        "temperature": 0,
        "rid": "proto-chat-1",
        "stream_options": {"include_usage": True},
    }
    response = httpx.post(f"{worker.url}/v1/chat/completions", json=body, timeout=10)
    *chunks, done = sse_payloads(response.text)
    assert done == "[DONE]"
    role, *deltas, finish, usage = chunks
    assert {c["id"] for c in chunks} == {"proto-chat-1"} and {c["model"] for c in chunks} == {"anything"}
    assert role["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    assert "usage" not in role
    assert all(d["choices"][0]["delta"]["content"] and d["choices"][0]["finish_reason"] is None for d in deltas)
    assert finish["choices"][0]["delta"] == {"reasoning_content": None}
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert usage["usage"]["prompt_tokens_details"] == {
        "cached_tokens": usage["usage"]["prompt_tokens_details"]["cached_tokens"]
    }


def test_cache_report_is_off_without_its_flag():
    with start_simulator() as plain:
        body = {"messages": chat("Hi"), "max_tokens": 2, "temperature": 0}
        usage = httpx.post(f"{plain.url}/v1/chat/completions", json=body, timeout=10).json()["usage"]
        assert usage["prompt_tokens_details"] is None


def test_the_keys_smg_adds_are_accepted(worker):
    """smg re-serializes bodies and adds its own defaults (§6.5); the worker must take them."""
    generate = {
        "text": "Hello",
        "sampling_params": {"max_new_tokens": 2},
        "model": None,
        "log_metrics": True,
        "background": False,
        "no_logs": False,
        "return_bytes": False,
        "return_entropy": False,
        "return_hidden_states": False,
        "return_text_in_logprobs": False,
    }
    assert httpx.post(f"{worker.url}/generate", json=generate, timeout=10).status_code == 200
    chat_body = {
        "model": "unknown",
        "messages": chat("Hi"),
        "max_completion_tokens": 2,
        "logprobs": False,
        "separate_reasoning": True,
        "stream_reasoning": True,
        "continue_final_message": False,
        "no_stop_trim": False,
        "ignore_eos": False,
        "skip_special_tokens": True,
        "return_hidden_states": False,
    }
    answer = httpx.post(f"{worker.url}/v1/chat/completions", json=chat_body, timeout=10)
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2


def test_schema_errors_are_400_before_the_stream_opens(worker):
    bad = httpx.post(
        f"{worker.url}/generate",
        timeout=10,
        json={"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 2, "bogus": 1}},
    )
    assert bad.status_code == 400 and "unknown field `bogus`" in bad.json()["error"]
    both = httpx.post(f"{worker.url}/generate", json={"text": "x", "input_ids": [1]}, timeout=10)
    assert both.status_code == 400
    typed = httpx.post(f"{worker.url}/generate", json={"text": "x", "sampling_params": {"max_new_tokens": "2"}})
    assert typed.status_code == 400


def test_openai_routes_refuse_other_content_types_and_bad_bodies(worker):
    wrong = httpx.post(f"{worker.url}/v1/chat/completions", content=b"{}", headers={"content-type": "text/plain"})
    assert wrong.status_code == 400 and wrong.json()["object"] == "error" and wrong.json()["code"] == 400
    empty = httpx.post(f"{worker.url}/v1/chat/completions", json={"messages": []})
    assert empty.status_code == 400


def test_errors_after_the_stream_opened_arrive_as_an_event_then_done(worker):
    too_long = "word " * 40000
    body = {"text": too_long, "stream": True, "sampling_params": {"max_new_tokens": 2}}
    response = httpx.post(f"{worker.url}/generate", json=body, timeout=30)
    assert response.status_code == 200
    error, done = sse_payloads(response.text)
    assert done == "[DONE]"
    assert error["error"]["code"] == 400 and "longer than the model's context length" in error["error"]["message"]
    plain = httpx.post(f"{worker.url}/generate", json={**body, "stream": False}, timeout=30)
    assert plain.status_code == 400 and "context length" in plain.json()["error"]["message"]


async def test_a_prompt_too_long_is_a_bad_request_with_a_readable_message(worker):
    async with SGLangClient(worker.url) as client:
        with pytest.raises(EngineBadRequest) as refused:
            await collect(client, GenerationRequest(prompt="word " * 40000, max_new_tokens=2))
    assert "too long" in refused.value.user_message


async def test_a_duplicate_rid_is_refused_in_stream(slow_worker):
    body = {"text": "Tell a story.", "rid": "dup-rid-0001", "stream": True, "sampling_params": {"max_new_tokens": 1000}}
    async with (
        httpx.AsyncClient(base_url=slow_worker.url, timeout=10) as http,
        http.stream("POST", "/generate", json=body) as first,
    ):
        # Keep the line iterator referenced: a dropped one is finalized, which closes the response
        # (and the worker rightly aborts the request when its client goes away).
        lines = first.aiter_lines()
        await anext(lines)
        second = await http.post("/generate", json=body)
        error, done = sse_payloads(second.text)
        assert error["error"]["message"] == "Duplicate request ID detected: dup-rid-0001" and done == "[DONE]"
    await until(lambda: get_load(slow_worker.url)["num_reqs"] == 0, what="the disconnect to abort the request")


async def test_abort_matches_rids_by_prefix(slow_worker):
    async with httpx.AsyncClient(base_url=slow_worker.url, timeout=10) as http:

        async def run(rid):
            body = {"text": "Tell a story.", "rid": rid, "sampling_params": {"max_new_tokens": 1000}}
            return (await http.post("/generate", json=body)).json()

        tasks = [asyncio.create_task(run(rid)) for rid in ("batch-7_a", "batch-7_b")]
        await until(lambda: get_load(slow_worker.url)["num_reqs"] == 2, what="both requests to start")
        assert (await http.post("/abort_request", json={"rid": "batch-7"})).status_code == 200
        results = await asyncio.gather(*tasks)
    assert [r["meta_info"]["finish_reason"]["type"] for r in results] == ["abort", "abort"]
    assert all(0 < r["meta_info"]["completion_tokens"] < 1000 for r in results)


async def test_flush_cache_is_refused_while_busy(slow_worker):
    async with SGLangClient(slow_worker.url) as client:
        request = GenerationRequest(prompt="Tell a story.", max_new_tokens=1000)
        task = asyncio.create_task(collect(client, request))
        await until(lambda: get_load(slow_worker.url)["num_reqs"] == 1, what="the request to run")
        refused = httpx.post(f"{slow_worker.url}/flush_cache")
        assert refused.status_code == 400 and refused.text.startswith("Cache flushed.")
        await client.cancel(request.rid)
        await task
    await until(lambda: httpx.post(f"{slow_worker.url}/flush_cache").status_code == 200, what="flush once idle")


def test_load_endpoints_in_the_shapes_smg_and_sglang_use(worker):
    legacy = httpx.get(f"{worker.url}/get_load").json()
    assert isinstance(legacy, list) and set(legacy[0]) == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}
    loads = httpx.get(f"{worker.url}/v1/loads", params={"include": "all"}).json()
    entry = loads["loads"][0]
    for key in (
        "num_running_reqs",
        "num_waiting_reqs",
        "num_used_tokens",
        "max_total_num_tokens",
        "token_usage",
        "cache_hit_rate",
        "memory",
        "queues",
    ):
        assert key in entry, key
    assert loads["version"] and loads["num_accelerators"] == 1


async def test_client_load_reads_each_endpoint_sglang_may_offer(worker):
    async with SGLangClient(worker.url) as client:
        load = await client.load()
    assert load.source == "v1/loads" and load.running_requests == 0 and load.total_tokens == 131072
    metrics = httpx.get(f"{worker.url}/metrics").text
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:gen_throughput",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:e2e_request_latency_seconds_count",
    ):
        assert name in metrics, name
    from inference.loads import from_metrics

    assert from_metrics(metrics).total_tokens == 131072


def test_metrics_are_404_without_enable_metrics(slow_worker):
    assert httpx.get(f"{slow_worker.url}/metrics").status_code == 404


async def test_info_endpoints(worker):
    async with SGLangClient(worker.url) as client:
        info = await client.server_info()
        models = await client.models()
    assert isinstance(info["tp_size"], int) and isinstance(info["dp_size"], int)
    assert info["served_model_name"] == "sim-small" and models == ["sim-small"]
    for key in ("model_path", "max_total_num_tokens", "max_running_requests", "internal_states", "version"):
        assert key in info, key
    for path in ("/model_info", "/get_model_info"):
        model_info = httpx.get(f"{worker.url}{path}").json()
        assert model_info["model_path"] == info["model_path"] and model_info["architectures"]
    assert httpx.get(f"{worker.url}/get_server_info").json()["model_path"] == info["model_path"]
    assert httpx.get(f"{worker.url}/v1/models/nope").status_code == 404


def test_health_is_503_while_starting_then_200():
    with start_simulator("--startup-delay", "1.5", wait_healthy=False) as starting:
        assert httpx.get(f"{starting.url}/health", timeout=10).status_code == 503
        assert httpx.get(f"{starting.url}/ready", timeout=10).status_code == 503
        # Generation works during warm-up; only the probes say "not yet".
        assert (
            httpx.post(
                f"{starting.url}/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 1}}, timeout=10
            ).status_code
            == 200
        )
        starting.wait_until(
            lambda: httpx.get(f"{starting.url}/health", timeout=10).status_code == 200,
            timeout=30,
            what="healthy after warm-up",
        )


def test_an_http2_preface_does_not_disturb_the_worker(worker):
    """smg probes for gRPC (HTTP/2) on the worker's port; the HTTP/1.1 server must shrug it off."""
    import socket

    host, port = worker.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        s.recv(1024)
    assert httpx.get(f"{worker.url}/health", timeout=10).status_code == 200


def test_server_stream_interval_sends_the_first_token_then_every_nth():
    with start_simulator("--stream-interval", "4") as spaced:
        body = {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 10, "temperature": 0}}
        *chunks, _ = sse_payloads(httpx.post(f"{spaced.url}/generate", json=body, timeout=10).text)
        own = {**body, "sampling_params": {**body["sampling_params"], "stream_interval": 1}}
        *every, _ = sse_payloads(httpx.post(f"{spaced.url}/generate", json=own, timeout=10).text)
    # SGLang: with an interval N > 1, output goes out when len(output_ids) % N == 1, and at the finish.
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 5, 9, 10]
    assert len(every) == 10  # the request's own stream_interval wins
